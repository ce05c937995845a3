"""Architecture choices (issue 25): LayerNorm vs RMSNorm, Pre- vs Post-Norm, ALiBi, the learned position
table, recurrence vs attention — each number the pages show, against an independent reference."""

from __future__ import annotations

import math
import re

import floats
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.common import i18n
from core.common.numbers import softmax
from core.learn import comparisons, quiz
from core.maths import norms as N
from core.maths import positions as R
from core.maths import recurrence

# ---------------------------------------------------------------------------------------------
# Pre-Norm vs Post-Norm: the stream's size, against blocks written from the formulas


def _reference_stream(toy, ids: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """[L+1, T, d] the toy's residual stream recomputed here from its weights with torch's own functional
    ops (F.layer_norm / F.rms_norm, F.linear, HF's apply_rotary_pos_emb, F.scaled_dot_product_attention),
    from the placement's formula: Pre-Norm h = x + Attn(Norm(x)), out = h + MLP(Norm(h)); Post-Norm
    h = Norm(x + Attn(x)), out = Norm(h + MLP(h))."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cfg = toy.cfg
    H, dh, d = cfg.n_heads, cfg.dh, cfg.d_model
    w = lambda p: p.detach().to(dtype)  # noqa: E731
    x = w(toy.embed_tokens.weight)[ids[0]]  # [T, d]
    T = x.shape[0]
    inv = 1.0 / cfg.rope_theta ** (torch.arange(0, dh, 2, dtype=dtype) / dh)
    ang = torch.arange(T, dtype=dtype)[:, None] * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()  # [T, dh]

    def norm(mod, h):
        if cfg.norm == "layernorm":
            return F.layer_norm(h, (d,), w(mod.weight), w(mod.bias), cfg.eps)
        return F.rms_norm(h, (d,), w(mod.weight), cfg.eps)

    def attn(blk, h):
        a = blk.self_attn
        q, k, v = (F.linear(h, w(p.weight)).view(T, H, dh).transpose(0, 1)[None] for p in (a.q_proj, a.k_proj, a.v_proj))
        q, k = apply_rotary_pos_emb(q, k, cos[None], sin[None])
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)[0]  # [H, T, dh]
        return F.linear(o.transpose(0, 1).reshape(T, H * dh), w(a.o_proj.weight))

    def mlp(blk, h):
        m = blk.mlp
        return F.linear(F.silu(F.linear(h, w(m.gate_proj.weight))) * F.linear(h, w(m.up_proj.weight)), w(m.down_proj.weight))

    out = [x]
    with torch.inference_mode():
        for blk in toy.layers:
            if cfg.norm_placement == "pre":
                h = x + attn(blk, norm(blk.input_layernorm, x))
                x = h + mlp(blk, norm(blk.post_attention_layernorm, h))
            else:
                h = norm(blk.input_layernorm, x + attn(blk, x))
                x = norm(blk.post_attention_layernorm, h + mlp(blk, h))
            out.append(x)
    return torch.stack(out).double().numpy()


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_growth_matches_blocks_written_from_the_formulas(norm):
    g = N.growth(norm)
    ids = N.growth_input()
    for placement in ("pre", "post"):
        toy = N.growth_toy(placement, norm)
        ours = N.mean_norms(N.stream_of(toy, ids))
        floats.assert_same(ours, g[placement], f"{placement}: the page's cached numbers")
        ref32, ref64 = (N.mean_norms(_reference_stream(toy, ids, dt)) for dt in (torch.float32, torch.float64))
        floats.assert_as_accurate(ours, ref32, ref64, f"{norm}, {placement}-norm: mean ‖x‖ per boundary")
    # what the caption says: Post-Norm resets the stream to √d after every block, Pre-Norm lets it grow
    d = N.GROWTH_D
    assert np.all(np.abs(g["post"][1:] - math.sqrt(d)) < 0.01 * math.sqrt(d))
    assert np.all(np.diff(g["pre"]) > -0.01 * g["pre"][:-1]) and g["pre"][-1] > 1.4 * g["pre"][0]


# ---------------------------------------------------------------------------------------------
# ALiBi


def test_alibi_slopes_by_hand_and_against_bloom():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    floats.assert_same(R.alibi_slopes(8), [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256], "H = 8")
    floats.assert_same(R.alibi_slopes(4), [1 / 4, 1 / 16, 1 / 64, 1 / 256], "H = 4")
    # 12 heads: the 8 slopes of 8 heads, then every other slope of 16 heads (2^(−h/2), h = 1, 3, 5, 7)
    floats.assert_same(R.alibi_slopes(12)[:8], R.alibi_slopes(8), "H = 12, first 8")
    floats.assert_within(R.alibi_slopes(12)[8:], [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5], 4 * floats.U64, "H = 12, last 4")
    T = 5
    for H in range(1, 17):
        alibi = build_alibi_tensor(torch.ones(1, T), H, torch.float32)  # [H, 1, T] = m_h · key position
        bloom = alibi[:, 0, 1].double().numpy()  # key position 1: the slope itself
        ours = R.alibi_slopes(H)
        # BLOOM raises a float32 base to integer powers ≤ 2·H: relative error ≤ (power + 2)·u
        floats.assert_within(bloom, ours, floats.gamma(2 * H + 2) * ours, f"BLOOM's slopes, H = {H}", "float32 powers")


def test_alibi_bias_by_hand():
    b = R.alibi_bias(R.alibi_slopes(8), 4)
    inf = -np.inf
    floats.assert_same(b[0], [[0, inf, inf, inf], [-0.5, 0, inf, inf], [-1.0, -0.5, 0, inf], [-1.5, -1.0, -0.5, 0]], "head 0")
    floats.assert_same(b[7, 3, :1], [-3 / 256], "head 7, 3 back")
    floats.assert_same(R.alibi_bias(np.array([0.25]), 3, causal=False)[0], [[0, 0.25, 0.5], [-0.25, 0, 0.25], [-0.5, -0.25, 0]],
                       "no mask: the sign flips ahead")


@pytest.mark.parametrize("flat", [False, True])
def test_alibi_attention_matches_sdpa_with_the_bias_as_mask(flat):
    """softmax(q·kᵀ/√dh + bias) here (float64) against torch's SDPA given the bias as attn_mask (float32),
    with V = the identity so that SDPA's output *is* its weight matrix."""
    H, T = 8, 10
    demo = R.alibi_demo(H, T, flat=flat)
    dh = demo.q.shape[1]
    q = torch.from_numpy(np.repeat(demo.q[None], H, 0)).float()[None]  # [1, H, T, dh]
    k = torch.from_numpy(np.repeat(demo.k[None], H, 0)).float()[None]
    v = torch.eye(T)[None, None].expand(1, H, T, T)
    mask = torch.from_numpy(demo.bias).float()[None]  # [1, H, T, T]: ALiBi + −∞ above the diagonal
    with torch.inference_mode():
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[0].double().numpy()  # [H, T, T]
    live = np.tril(np.ones((T, T), dtype=bool))
    s = np.where(live, demo.scores[None] + demo.bias, -np.inf)
    # the bound of floats.softmax_error, with the bias's own float32 rounding and its addition (2u·(|b| + |s + b|)) in each score
    qa, ka = np.abs(demo.q), np.abs(demo.k)
    delta = floats.gamma(dh + 4) / math.sqrt(dh) * (qa @ ka.T)[None] + 2 * floats.U32 * np.where(
        live, np.abs(demo.bias) + np.abs(s), 0)
    big = np.where(live, delta, 0).max(-1, keepdims=True)
    spread = np.where(live, s.max(-1, keepdims=True) - np.where(live, s, 0), 0).max(-1, keepdims=True)
    eps = 2 * floats.U32 * (spread + 4) + floats.gamma(T + 1)
    bound = demo.weights * np.expm1(2 * big + np.log1p(eps))
    floats.assert_within(got, demo.weights, bound, "ALiBi weights vs SDPA", "float32 scores + bias, softmax")
    np.testing.assert_array_equal(got[:, ~live], 0.0)
    # recency: with the content removed, every head's last row decreases towards the first key
    if flat:
        assert np.all(np.diff(demo.weights[:, -1, :], axis=-1) > 0)
        floats.assert_within(demo.plain[-1], 1.0 / T, floats.gamma(T + 1) / T, "no bias, no content: uniform")


def test_alibi_readout_and_bloom_form_give_the_same_weights():
    """BLOOM adds m·j (key position) instead of −m·(i − j): a constant per row, which softmax ignores."""
    demo = R.alibi_demo(8, 6)
    T = 6
    j = np.arange(T)[None, None, :]
    bloom = np.where(np.isfinite(demo.bias), demo.slopes[:, None, None] * j, -np.inf)
    w = softmax(demo.scores[None] + bloom)
    floats.assert_within(w, demo.weights, 4 * floats.gamma(T + 8, floats.U64) * (1 + np.abs(demo.scores).max() + 8), "BLOOM form")
    r = R.alibi_readout(demo, 0)
    assert r["self_alibi"] == f"{demo.weights[0, -1, -1]:.3f}" and r["m"] == "0.5"


# ---------------------------------------------------------------------------------------------
# learned positions: a lookup, and no row past the table


def test_learned_lookup_is_the_table_row_and_stops_at_its_end():
    P = 16
    toy = R.learned_toy(P)
    table = R.learned_table(toy)
    assert table.shape == (P, R.LEARNED_D)
    for start in (0, 6, P - R.LEARNED_READ):
        rows = R.learned_lookup(toy, start, R.LEARNED_READ)
        ref = F.embedding(torch.arange(start, start + R.LEARNED_READ), toy.embed_positions.weight).detach().double().numpy()
        floats.assert_same(rows, ref, f"rows {start}…")  # a lookup: the same bits
    assert R.learned_lookup(toy, P - R.LEARNED_READ + 1, R.LEARNED_READ) is None  # position P asked: refused
    with pytest.raises(IndexError):  # torch's own embedding has no row P either
        F.embedding(torch.tensor([P]), toy.embed_positions.weight)
    before = torch.random.get_rng_state()
    R.learned_toy(P)
    assert torch.equal(before, torch.random.get_rng_state())  # the global generator is left alone


# ---------------------------------------------------------------------------------------------
# recurrence vs attention: the last output's dependence on each input


def _rnn_jacobian_norms(rnn, x: np.ndarray, dtype) -> np.ndarray:
    """‖∂h_T/∂x_t‖_F by hand: h_s = tanh(W_ih x_s + b_ih + W_hh h_{s−1} + b_hh); ∂h_T/∂x_t = D_T W_hh D_{T−1} … W_hh D_t W_ih,
    D_s = diag(1 − h_s²)."""
    Wi, Wh = (rnn.weight_ih_l0.detach().double().numpy().astype(dtype), rnn.weight_hh_l0.detach().double().numpy().astype(dtype))
    b = (rnn.bias_ih_l0 + rnn.bias_hh_l0).detach().double().numpy().astype(dtype)
    x = x.astype(dtype)
    T, d = x.shape
    h, hs = np.zeros(d, dtype), []
    for t in range(T):
        h = np.tanh(Wi @ x[t] + Wh @ h + b)
        hs.append(h)
    out, J = np.zeros(T), np.eye(d, dtype=dtype)
    for t in range(T - 1, -1, -1):
        J = J * (1 - hs[t] ** 2)[None, :]  # J ← J · D_t
        out[t] = np.linalg.norm((J @ Wi).astype(np.float64))
        J = J @ Wh
    return out


def _attention_jacobian_norms(q, k, v, x: np.ndarray, dtype) -> np.ndarray:
    """‖∂y_T/∂x_t‖_F by hand for y_T = Σ_j w_j V_j, w = softmax(s), s_j = q_T·k_j/√d: ∂y/∂x_t = w_t W_v +
    A (∂s/∂x_t) with A = Vᵀ(diag(w) − w wᵀ); ∂s_i/∂x_t = (δ_it q_Tᵀ W_k + δ_tT k_iᵀ W_q)/√d."""
    Wq, Wk, Wv = (m.weight.detach().double().numpy().astype(dtype) for m in (q, k, v))
    x = x.astype(dtype)
    T, d = x.shape
    Q, K, V = x @ Wq.T, x @ Wk.T, x @ Wv.T
    s = K @ Q[-1] / np.sqrt(d)
    w = np.exp(s - s.max())
    w = w / w.sum()
    A = V.T @ (np.diag(w) - np.outer(w, w))  # [d, T]
    out = np.zeros(T)
    for t in range(T):
        J = w[t] * Wv + np.outer(A[:, t], Q[-1] @ Wk) / np.sqrt(d)
        if t == T - 1:
            J = J + A @ K @ Wq / np.sqrt(d)
        out[t] = np.linalg.norm(J.astype(np.float64))
    return out


def test_reach_matches_hand_jacobians():
    res = recurrence.reach()
    rnn, q, k, v = recurrence.reach_layers()
    x = recurrence.reach_input().double().numpy()
    floats.assert_as_accurate(res.rnn, _rnn_jacobian_norms(rnn, x, np.float32), _rnn_jacobian_norms(rnn, x, np.float64),
                              "RNN ‖∂h_T/∂x_t‖")
    floats.assert_as_accurate(res.attention, _attention_jacobian_norms(q, k, v, x, np.float32),
                              _attention_jacobian_norms(q, k, v, x, np.float64), "attention ‖∂y_T/∂x_t‖")
    # what the caption says: the RNN's reach decays step by step, attention's does not
    r = recurrence.reach_readout(res)
    assert float(r["factor"]) > 1.5 and res.rnn[0] < 1e-6 * res.rnn[-1]
    assert res.attention.min() > 0.1 * res.attention.max()


# ---------------------------------------------------------------------------------------------
# tables, quiz, pages


def test_tables_have_every_cell_in_both_languages():
    known = i18n.catalogue()
    every = [f"arch.{n}.{r}.{c}" for n, (rows, cols) in comparisons.TABLES.items() for r in rows for c in cols]
    assert all(k in known for k in every + [f"arch.{n}.col.{c}" for n, (_, cols) in comparisons.TABLES.items() for c in cols])
    for name in comparisons.TABLES:
        en, zh = comparisons.table(name, "en"), comparisons.table(name, "zh")
        assert en.shape == zh.shape and not (en.to_numpy() == "").any()
        assert not any("⟦" in str(c) for c in [*zh.to_numpy().ravel(), *zh.columns])


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:\.\d+)?", text))


def test_quiz_items_say_what_the_pages_compute():
    g = N.growth_readout(N.growth("layernorm"))
    why = i18n.t("quiz.pre_post_norm.why", "en")
    assert {g["pre_first"], g["pre_last"], g["layers"], g["sqrt_d"]} <= _numbers(why)
    assert "Norm(x)" in i18n.t(f"quiz.pre_post_norm.o{quiz.BY_ID['pre_post_norm'].correct}", "en")
    s = R.alibi_slopes(8)
    why = i18n.t("quiz.alibi.why", "en")
    assert f"{10 * s[0]:g}" in why and f"{10 * s[-1]:.2f}" in why and f"1/{round(1 / s[-1])}" in why
    assert "m_h" in i18n.t(f"quiz.alibi.o{quiz.BY_ID['alibi'].correct}", "en")


def test_learned_read_and_future_keys_by_hand():
    """Moved out of pages/positions.py: the toy's lookup is its table's rows (or refused past them), and the
    grey cells of a causal figure are the strict upper triangle."""
    toy = R.learned_toy(16)
    assert R.learned_read(toy, 6) is True and R.learned_read(toy, 12) is True  # rows 12 … 15: the last ones
    assert R.learned_read(toy, 13) is None  # row 16 is past a 16-row table
    assert R.future_keys(3).tolist() == [[False, True, True], [False, False, True], [False, False, False]]
