"""Inside the real model: tokens & embeddings, same token in two contexts, attention heads, ablation.

Every number the four pages show is checked here against an independent computation (torch,
a hand-worked example, or a model whose weights were edited by hand)."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import floats
import numpy as np
import pytest
import torch

from core import backends
from core.engine import roles, tokens
from core.inside import ablation, embeddings, heads
from core.web import chips

PAGES = ("tokens", "context", "heads", "ablation")
ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------
# embeddings


def _cos_bound(d: int) -> float:
    """How far two float64 routes of the cosine of two d-vectors can lie apart: the dot product is off
    by ≤ γ_d Σ|a·b| ≤ γ_d ‖a‖‖b‖ (Cauchy–Schwarz), each norm by ≤ γ_d/2 + u relative (a sum of d squares,
    a square root), then a product and a division: ≤ γ_{2d+4} on a cosine, per route."""
    return float(floats.sum_bound(1.0, 2 * d + 4, u=floats.U64))


def _pearson_bound(x: np.ndarray, y: np.ndarray, dy: float) -> float:
    """How far two float64 routes of Pearson's r of (x, y) can lie apart when their y differ by ≤ dy
    each. Moving every y by ≤ dy moves the centred y by ≤ 2dy, so S_xy by ≤ 2dy Σ|x−x̄| and S_yy by
    ≤ 4dy Σ|y−ȳ| (first order); each route rounds its centred sums by ≤ γ_n relative to Σ|x−x̄||y−ȳ|
    ≤ √(S_xx S_yy) and to S_xx, S_yy, and its means by ≤ γ_n mean|x|, which the centring turns into
    ≤ γ_n mean|x| / std(x) of r (same for y)."""
    xc, yc = x - x.mean(), y - y.mean()
    sxx, syy = (xc**2).sum(), (yc**2).sum()
    r = abs((xc * yc).sum()) / np.sqrt(sxx * syy)
    moved = 2 * dy * np.abs(xc).sum() / np.sqrt(sxx * syy) + r * 2 * dy * np.abs(yc).sum() / syy
    cond = 1 + np.abs(x).mean() / x.std() + np.abs(y).mean() / y.std()
    return float(moved + floats.sum_bound((1 + r) * cond, len(x) + 4, u=floats.U64))


def test_lookup_is_a_row_of_the_weight_matrix(smol):
    E = embeddings.embedding_matrix(smol)
    W = smol.model.get_input_embeddings().weight
    assert E.shape == (49152, 576) == tuple(W.shape)
    tr = backends.trace(smol, "苹果很好吃。")
    rows = embeddings.lookup(E, tr.token_ids)
    for k, i in enumerate(tr.token_ids):
        np.testing.assert_array_equal(rows[k], W[int(i)].detach().numpy())
    np.testing.assert_array_equal(rows, tr.embeddings)  # what the forward pass saw is exactly E[id]


def test_id_distance_study_matches_torch(smol):
    E = embeddings.embedding_matrix(smol)
    s = embeddings.id_distance_study(E, n_pairs=500, seed=3)
    Et = torch.from_numpy(E).double()
    cos = torch.nn.functional.cosine_similarity(Et[s.id_a], Et[s.id_b], dim=1).numpy()
    d_model = E.shape[1]
    floats.assert_within(s.cosine, cos, _cos_bound(d_model), what="cosines", why="two float64 routes of a cosine")
    assert np.all(s.id_a != s.id_b)
    np.testing.assert_array_equal(s.distance, np.abs(s.id_a - s.id_b))
    d = torch.tensor(s.distance, dtype=torch.float64)
    c = torch.tensor(cos)
    r = ((d - d.mean()) * (c - c.mean())).sum() / torch.sqrt(((d - d.mean()) ** 2).sum() * ((c - c.mean()) ** 2).sum())
    floats.assert_within(s.pearson, float(r), _pearson_bound(d.numpy(), cos, _cos_bound(d_model)), what="Pearson's r",
                         why="two float64 routes, on cosines that differ by two float64 routes")
    ex = torch.nn.functional.cosine_similarity(Et[1023], Et[1024], dim=0).item()
    assert s.example[:2] == (1023, 1024)
    floats.assert_within(s.example[2], ex, _cos_bound(d_model), what="the example's cosine", why="two float64 routes of a cosine")
    # the tutorial's claim, measured: adjacent IDs are not meaningfully more alike than random ones
    assert abs(s.mean_adjacent - s.mean_random) < 0.05
    assert s.example[2] < s.mean_random


def test_pca_matches_torch_svd():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 40)) @ np.diag(np.linspace(3, 0.1, 40))
    p = embeddings.pca2(X)
    Xc = torch.from_numpy(X - X.mean(0))
    _U, S, Vh = torch.linalg.svd(Xc, full_matrices=False)
    ref = (Xc @ Vh[:2].T).numpy()
    # Two float64 SVDs (numpy's, torch's LAPACK): each is backward stable, the exact SVD of Xc + Δ with
    # ‖Δ‖ ≤ p(m, n)·u·‖Xc‖ (LAPACK's "modest function", taken here as m·n: γ_mn). Then each singular value
    # moves by ≤ ‖Δ‖ (Weyl), a leading singular vector by ≤ 2‖Δ‖ / gap (Wedin's sin θ), a coordinate Xc·v
    # by ‖Xc‖ times that plus its dot product's γ_n ‖Xc‖; a share S_i² / F (F = Σ S²) by ≤ 2 S_0 ‖Δ‖ / F +
    # 2√r ‖Δ‖ / √F (F itself moves by ≤ 2‖Δ‖ Σ S ≤ 2‖Δ‖ √(rF)), + a few roundings of the shares themselves.
    m, n = X.shape
    s = S.numpy()
    delta = floats.sum_bound(s[0], m * n, u=floats.U64)  # both routes' ‖Δ‖ together
    gap, F = min(s[0] - s[1], s[1] - s[2]), (s**2).sum()
    for j in range(2):  # principal axes are defined up to sign
        sign = np.sign(ref[:, j] @ p.coords[:, j])
        floats.assert_within(p.coords[:, j], sign * ref[:, j], 2 * s[0] * delta / gap + floats.sum_bound(s[0], n, u=floats.U64),
                             what=f"PCA coordinates {j}", why="two backward-stable float64 SVDs (Wedin)")
    floats.assert_within(p.explained, (S[:2] ** 2 / (S**2).sum()).numpy(),
                         2 * s[0] * delta / F + 2 * np.sqrt(len(s)) * delta / np.sqrt(F) + floats.sum_bound(1.0, len(s) + 2, u=floats.U64),
                         what="explained variance", why="two backward-stable float64 SVDs (Weyl)")
    assert p.coords.shape == (12, 2) and p.explained[0] >= p.explained[1]


def test_word_vectors_and_parse(smol):
    words = embeddings.parse_words(" cat, dog,,苹果\n cat")
    assert words == [" cat", " dog", "苹果"]
    E = embeddings.embedding_matrix(smol)
    vecs = embeddings.word_vectors(smol, E, words)
    assert len(vecs[0].ids) == 1 and vecs[0].ids == tuple(embeddings.word_ids(smol.tokenizer, " cat"))
    floats.assert_same(vecs[0].vector, E[vecs[0].ids[0]], "a one-token word's vector: its row")
    assert len(vecs[2].ids) == 4  # 苹 is three byte tokens, 果 one
    floats.assert_same(vecs[2].vector, E[list(vecs[2].ids)].astype(np.float64).mean(0), "a word's vector: the mean of its rows")


def test_token_sources_chat(smol):
    tok = smol.tokenizer
    enc = tokens.encode(tok, "Hi there 苹果", chat=True)
    src = embeddings.token_sources(tok, enc.text, "Hi there 苹果", enc.ids, chat=True)
    user = [i for i, s in zip(enc.ids, src) if s == "user"]
    assert tok.decode(user) == "Hi there 苹果"
    specials = [i for i, s in zip(enc.ids, src) if s == "special"]
    assert set(specials) == {1, 2} and src.count("template") > 5
    plain = tokens.encode(tok, "Hi there", chat=False)
    assert embeddings.token_sources(tok, plain.text, "Hi there", plain.ids, chat=False) == ["user"] * len(plain.ids)


def test_chips_escape_html():
    h = chips.chips_html(["<script>", " a&b"], [5, 6], kinds=["user", "special"])
    assert "<script>" not in h and "&lt;script&gt;" in h and "␣a&amp;b" in h


# ---------------------------------------------------------------------------------------------
# same token, different context


def test_context_similarity_apple(smol):
    a, b, word = embeddings.CONTEXT_PAIRS["zh_ctx"]
    ta, tb = backends.trace(smol, a), backends.trace(smol, b)
    ia, ib = embeddings.default_positions(ta.token_ids, tb.token_ids, embeddings.word_ids(smol.tokenizer, word))
    assert (ia, ib) == (13, 12)  # not the 果 of 水果 at position 4
    assert ta.token_ids[ia] == tb.token_ids[ib] == 43774 and ta.tokens[ia] == "果"
    sim = embeddings.context_similarity(ta.resid, ia, tb.resid, ib)
    assert sim.shape == (31,)
    # same ID → same row of E: the cosine of a vector with itself, Σx² / (√Σx²)², is 1 up to the square
    # root's and the product's rounding (not always exactly: fl(√s)² need not be s)
    self_cos = floats.sum_bound(1.0, 2 * ta.resid.shape[-1] + 4, u=floats.U64, routes=1)
    floats.assert_within(sim[0], 1.0, self_cos, what="layer 0 (the embedding rows)", why="a float64 cosine of a vector with itself")
    ref = torch.nn.functional.cosine_similarity(torch.from_numpy(ta.resid[:, ia]).double(), torch.from_numpy(tb.resid[:, ib]).double(), dim=1)
    floats.assert_within(sim, ref.numpy(), _cos_bound(ta.resid.shape[-1]), what="cosines", why="two float64 routes of a cosine")
    assert sim[-1] < 0.99 and sim[1:].max() < 1.0

    one = backends.trace(smol, embeddings.CONTEXT_PAIRS["zh_one"][0])  # the tutorial's sentence, its two 苹果
    i, j = embeddings.default_positions(one.token_ids, one.token_ids, embeddings.word_ids(smol.tokenizer, "苹果"))
    assert (i, j) == (3, 14)
    s2 = embeddings.context_similarity(one.resid, i, one.resid, j)
    floats.assert_within(s2[0], 1.0, self_cos, what="layer 0 (the embedding rows)", why="a float64 cosine of a vector with itself")
    assert s2[-1] < 0.99


def _eager_stream(ref, ids, dtype: str) -> np.ndarray:
    """HF eager's residual stream of ``ids`` at every block boundary, [L+1, T, d] float64: its
    hidden_states before the final norm, and the final norm's input."""
    seen = {}
    norm = roles.find_sites(ref.model(dtype)).require_final_norm()
    h = norm.register_forward_pre_hook(lambda _m, args: seen.setdefault("x", args[0]))
    try:
        out = ref.run(ids, dtype, output_hidden_states=True)
    finally:
        h.remove()
    return np.stack([*(x[0].double().numpy() for x in out.hidden_states[:-1]), seen["x"][0].double().numpy()])


def test_context_identical_prefix_stays_identical(smol, eager_refs):
    a, b, word = embeddings.CONTEXT_PAIRS["zh_start"]
    ta, tb = backends.trace(smol, a), backends.trace(smol, b)
    ia, ib = embeddings.default_positions(ta.token_ids, tb.token_ids, embeddings.word_ids(smol.tokenizer, word))
    assert embeddings.same_prefix(ta.token_ids, ia, tb.token_ids, ib)
    # causal: 果 has not read 好吃 / 发布 yet: in both traces its stream is that of the shared prefix alone
    # (two traces of different lengths: other matrix shapes, so equal up to float32 rounding)
    ref32, ref64 = (_eager_stream(eager_refs["smollm2"], ta.token_ids[: ia + 1], dt)[:, -1] for dt in ("float32", "float64"))
    for tr, i in ((ta, ia), (tb, ib)):
        floats.assert_as_accurate(tr.resid[:, i], ref32, ref64, what="the stream at the end of the shared prefix")
    # so their cosine is 1 up to that: each vector within the allowance A per entry of the exact x, so
    # ‖x_a − x_b‖ ≤ 2A√d, and 1 − cos ≤ 2‖x_a − x_b‖² / (‖x‖ − A√d)² (‖x/‖x‖ − y/‖y‖‖ ≤ 2‖x − y‖/‖x‖),
    # + the float64 cosine's own rounding
    sim = embeddings.context_similarity(ta.resid, ia, tb.resid, ib)
    d = ref64.shape[-1]
    A = floats.allowed_error(ref32, ref64)
    norm = np.linalg.norm(ref64, axis=-1) - A * np.sqrt(d)
    floats.assert_within(sim, 1.0, 2 * (2 * A * np.sqrt(d)) ** 2 / norm**2 + _cos_bound(d), what="cosine over the shared prefix",
                         why="two float32 routes of one vector, each as accurate as HF's float32 eager route")
    base = embeddings.context_baseline(ta.resid, ia, tb.resid, ib)
    assert base[-1] < sim[-1]


# ---------------------------------------------------------------------------------------------
# heads


def _hand_pattern() -> np.ndarray:
    w = np.array([[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])
    return w[None, None]  # [L=1, H=1, T=3, T=3]


def test_head_atlas_by_hand():
    at = heads.head_atlas_of(iter(_hand_pattern()))
    # float64 arithmetic on a few fractions both ways: pytest.approx's rel 1e-6 is ~10⁹ × float64's error
    h2 = -(0.2 * np.log2(0.2) + 0.3 * np.log2(0.3) + 0.5 * np.log2(0.5))
    assert at.entropy[0, 0] == pytest.approx((1.0 + h2) / 2)
    assert at.prev_token[0, 0] == pytest.approx((0.5 + 0.3) / 2)
    assert at.first_token[0, 0] == pytest.approx((0.5 + 0.2) / 2)
    assert at.max_weight[0, 0] == pytest.approx((0.5 + 0.5) / 2)


def test_drop_first_key_renormalises():
    w = heads.drop_first_key(_hand_pattern()[0, 0])
    assert np.isnan(w[:, 0]).all() and np.isnan(w[0]).all()
    # float64: 0.3 / 0.8 and 0.5 / 0.8 are off by a few roundings; assert_allclose's rtol 1e-7 is ~10⁹ × that
    np.testing.assert_allclose(w[1, 1:], [1.0, 0.0])
    np.testing.assert_allclose(w[2, 1:], [0.375, 0.625])


def test_head_atlas_on_real_trace(smol):
    tr = backends.trace(smol, "The cat sat on the mat because it was tired.")
    w = backends.stacked_layers(smol, tr, with_pattern=True)["attn_pattern"].astype(np.float64)
    at = heads.head_atlas_of(iter(w))
    streamed = heads.head_atlas_of(tr.site("attn_pattern", i) for i in range(tr.n_layers))
    for name in ("entropy", "prev_token", "first_token", "max_weight"):  # the same weights through the same per-layer code
        floats.assert_same(getattr(streamed, name), getattr(at, name), f"the streamed atlas's {name}")
    l, h, T = 5, 4, tr.n_tokens
    assert at.prev_token[l, h] == np.mean([w[l, h, i, i - 1] for i in range(1, T)])  # the same numbers, the same mean
    assert at.first_token[l, h] == w[l, h, 1:, 0].mean()
    assert at.entropy.shape == (30, 9) and (at.entropy >= 0).all()
    assert heads.top_heads(at.prev_token, 1)[0][2] == at.prev_token.max()  # the value itself, read back
    assert at.first_token.max() > 0.5  # SmolLM2 has strong first-token sinks


# ---------------------------------------------------------------------------------------------
# ablation


def _plain_probs(model, ids):
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits
    return torch.softmax(logits[0, -1].double(), dim=-1).numpy()


def _no_hooks(model) -> bool:
    return all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def _logit_allowance(ref, ids) -> float:
    """How far a float32 route may lie from the exact next-token logits of ``ids``: ``floats.assert_as_accurate``'s
    allowance (ROUTE_FACTOR × HF's float32 eager route's distance from its float64 twin + one float32
    rounding of the largest logit), measured on the unablated run: an ablated run is the same network
    with one head's output zeroed."""
    z32, z64 = (ref.run(ids, dt).logits[0, -1].double().numpy() for dt in ("float32", "float64"))
    return floats.allowed_error(z32, z64)


def _kl_rounding(p: np.ndarray, q: np.ndarray) -> float:
    """One float64 route's rounding of KL(p ‖ q) = Σ p (log p − log q) over V terms: each log off by
    ≤ 2u |log| (libm's ulp), the subtraction and product by u each, the sum by γ_V Σ |term|."""
    m = p > 0
    lp, lq = np.log(p[m]), np.log(np.maximum(q[m], 1e-300))
    terms = np.abs(p[m] * (lp - lq))
    return float(2 * floats.U64 * (p[m] * (np.abs(lp) + np.abs(lq))).sum() + floats.sum_bound(terms.sum(), m.sum() + 2, u=floats.U64, routes=1))


def test_ablating_nothing_changes_nothing(smol):
    ids = tokens.encode(smol.tokenizer, "What is the capital of France?").ids
    p = ablation.next_token_probs(smol, ids, [])
    np.testing.assert_array_equal(p, _plain_probs(smol.model, ids))
    assert _no_hooks(smol.model)


def test_ablated_head_slice_is_zero_and_others_untouched(smol):
    ids = tokens.encode(smol.tokenizer, "苹果很好吃。").ids
    layer, head, dh = 3, 4, 64
    o = roles.find_sites(smol.model).attns[layer].o_proj
    seen = {}

    def grab(name):
        def pre(_m, args):
            seen[name] = args[0].clone()
        return pre

    with torch.inference_mode():
        h = o.register_forward_pre_hook(grab("plain"))
        try:
            smol.model(input_ids=torch.tensor([ids]), use_cache=False)
        finally:
            h.remove()
        with ablation.zero_heads(smol, [(layer, head)]):
            h = o.register_forward_pre_hook(grab("ablated"))  # runs after the zeroing hook
            try:
                smol.model(input_ids=torch.tensor([ids]), use_cache=False)
            finally:
                h.remove()
    x0, x1 = seen["plain"][0], seen["ablated"][0]  # [T, H*dh]
    sl = slice(head * dh, (head + 1) * dh)
    assert x0[:, sl].abs().sum() > 0 and torch.all(x1[:, sl] == 0)
    keep = torch.ones(x0.shape[-1], dtype=torch.bool)
    keep[sl] = False
    assert torch.equal(x0[:, keep], x1[:, keep])  # layers before are untouched, so are other heads
    assert _no_hooks(smol.model)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_ablation_equals_model_with_zeroed_output_columns(tiny_loaded, arch):
    """Independent recomputation: a copy of the model whose output projection ignores the head. The
    same route: zeroing the head's slice of the projection's input or its columns of the weight puts
    exact zeros in the same products of the same sums (0·w = x·0 = 0, and adding 0 is exact), so the
    same bits."""
    loaded = tiny_loaded[arch]
    ids = tokens.encode(loaded.tokenizer, "I ate an apple pie.").ids
    layer, head, dh = 1, 2, loaded.facts.head_dim
    got = ablation.next_token_probs(loaded, ids, [(layer, head)])
    twin = copy.deepcopy(loaded.model)
    proj = ablation.out_proj(roles.find_sites(twin).attns[layer])
    with torch.no_grad():
        if arch == "gpt2":  # Conv1D: weight [in, out]
            proj.weight[head * dh : (head + 1) * dh, :] = 0
        else:  # Linear: weight [out, in]
            proj.weight[:, head * dh : (head + 1) * dh] = 0
    floats.assert_same(got, _plain_probs(twin, ids), "one head ablated vs its columns zeroed")
    # the head did something: the unablated run is the same route but for the ablation, and the change
    # is ≥ 0.1 % of the largest probability (float32 rounding of the logits moves it by ~10⁻⁶ of itself)
    plain = _plain_probs(loaded.model, ids)
    assert np.abs(got - plain).max() > 1e-3 * plain.max()
    # the whole layer: every column zeroed (GPT-2's c_proj bias stays, as documented)
    whole = ablation.next_token_probs(loaded, ids, [(layer, None)])
    with torch.no_grad():
        proj.weight.zero_()
    floats.assert_same(whole, _plain_probs(twin, ids), "a layer ablated vs its columns zeroed")
    assert _no_hooks(loaded.model)


def test_sweep_equals_single_ablations_and_effect(tiny_loaded, eager_refs):
    loaded = tiny_loaded["llama"]
    ids = tokens.encode(loaded.tokenizer, "The cat sat on the mat.").ids
    sw = ablation.sweep_heads(loaded, ids, [0, 2], chunk=5)  # chunk 5 splits a layer: rows must still line up
    assert sw.shape == (2, loaded.facts.n_heads, loaded.facts.vocab_size)
    # batched vs one at a time: two float32 routes of the logits, each within the allowance A of the exact
    # ones, so ≤ 2A apart; a softmax moves log p by ≤ twice that (+ its own float64 rounding)
    moved = np.expm1(2 * 2 * _logit_allowance(eager_refs["llama"], ids)) + 2 * floats.gamma(loaded.facts.vocab_size + 4, floats.U64)
    for li, layer in enumerate([0, 2]):
        for h in range(loaded.facts.n_heads):
            single = ablation.next_token_probs(loaded, ids, [(layer, h)])
            floats.assert_within(sw[li, h], single, np.maximum(sw[li, h], single) * moved, what=f"head {layer}.{h} swept vs alone",
                                 why="softmax of two float32 routes of the logits")
    before = ablation.next_token_probs(loaded, ids)
    after = sw[1, 3]
    e = ablation.effect(before, after)
    kl = torch.nn.functional.kl_div(torch.tensor(after).log(), torch.tensor(before), reduction="sum").item()
    floats.assert_within(e.kl, kl, 2 * _kl_rounding(before, after), what="KL", why="two float64 routes of the KL sum")
    assert e.top_id == int(before.argmax()) and e.delta == after[e.top_id] - before[e.top_id]  # the same subtraction
    assert _no_hooks(loaded.model)


def test_hooks_removed_on_error_and_thread_scoped(tiny_loaded):
    loaded = tiny_loaded["llama"]
    ids = tokens.encode(loaded.tokenizer, "hello world").ids
    with pytest.raises(ValueError):
        ablation.next_token_probs(loaded, ids, [(99, 0)])
    with pytest.raises(RuntimeError), ablation.zero_heads(loaded, [(0, 0)]):
        raise RuntimeError("boom")
    assert _no_hooks(loaded.model)
    plain = _plain_probs(loaded.model, ids)
    other = {}
    with ablation.zero_heads(loaded, [(0, None), (1, None), (2, None)]):
        t = threading.Thread(target=lambda: other.setdefault("p", _plain_probs(loaded.model, ids)))
        t.start()
        t.join()
    np.testing.assert_array_equal(other["p"], plain)  # another session's forward never sees our hook
    assert _no_hooks(loaded.model)


# ---------------------------------------------------------------------------------------------
# pages


def _app(stem: str, lang: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["lang"] = lang
    at.switch_page(f"pages/{stem}.py")
    at.run()
    return at


def _arr(v) -> np.ndarray:
    """A plotly array from a figure spec: a list, or a typed array {dtype, bdata (base64)}."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).astype(float)
    return np.asarray(v, dtype=float)


def _figs(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("stem", PAGES)
def test_pages_render(smol, stem, lang):
    at = _app(stem, lang)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) >= 1
    text = " ".join(m.value for m in at.markdown)
    assert ("模型" in text or "注意力" in text or "Token" in text) if lang == "zh" else "the" in text
    assert "⟦" not in text  # no missing i18n key
    caps = " ".join(c.value for c in at.caption)
    assert ("数字来自真实模型" if lang == "zh" else "numbers from the real model") in caps


def test_context_page_numbers(smol):
    at = _app("context", "en")
    assert at.metric[0].value == "1.000"  # 3 decimals like the other two metrics
    assert all(len(m.value.split(".")[-1]) == 3 for m in at.metric)
    fig = _figs(at)[0]
    y = _arr(fig["data"][0]["y"])
    floats.assert_within(y[0], 1.0, floats.sum_bound(1.0, 2 * smol.facts.d_model + 4, u=floats.U64, routes=1), what="layer 0",
                         why="a float64 cosine of a vector with itself")
    assert y.min() < 0.99 and len(y) == 31


def test_heads_page_grid_and_jump(smol):
    at = _app("heads", "en")
    grid = _figs(at)[0]
    titles = [a["text"] for a in grid["layout"]["annotations"]]
    assert titles[:4] == ["h0 · KV0", "h1 · KV0", "h2 · KV0", "h3 · KV1"] and len(grid["data"]) == 9
    pick = at.selectbox(key="heads_jump_pick").value
    at.button(key="heads_jump_btn").click().run()
    assert not at.exception
    assert (at.slider(key="heads_layer").value, at.slider(key="heads_head").value) == (pick[0], pick[1])


def test_ablation_page_sweep_matches_core(smol, eager_refs):
    at = _app("ablation", "en")
    fig = _figs(at)[1]
    kl_page = _arr(fig["data"][0]["y"])
    ids = tokens.encode(smol.tokenizer, "What is the capital of France?", chat=True).ids  # the chat template is on by default
    before = ablation.next_token_probs(smol, ids)
    after = ablation.next_token_probs(smol, ids, [(0, 5)])
    # the page ablates the layer's heads in one batch, this run alone: two float32 routes of the logits,
    # ≤ 2A apart, so log(after) moves by ≤ 4A and KL(before ‖ after) = Σ before·(log before − log after)
    # by ≤ 4A (Σ before = 1); the page's "before" is this very computation; + each KL's float64 rounding
    bound = 4 * _logit_allowance(eager_refs["smollm2"], ids) + 2 * _kl_rounding(before, after)
    floats.assert_within(kl_page[5], ablation.kl_divergence(before, after), bound, what="the page's KL of head 0.5",
                         why="two float32 routes of the ablated logits")


def test_pages_on_a_tiny_local_model_with_full_sweep(tiny_dirs, monkeypatch):
    """A local model the operator offers (tiny Llama): every page renders, and the all-heads sweep matches core."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("XRAY_MODELS", f"tiny-llama={tiny_dirs['llama']}")  # links name offered ids, never paths
    for stem in PAGES:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
        at.query_params["model"] = "tiny-llama"
        at.switch_page(f"pages/{stem}.py")
        at.run()
        assert not at.exception and not at.error, (stem, at.exception, [e.value for e in at.error])
    at.toggle(key="ablation_all").set_value(True).run()
    assert not at.exception
    kl_all = _arr(_figs(at)[2]["data"][0]["y"])
    assert kl_all.shape == (3 * 6,) and (kl_all >= 0).all() and kl_all.max() > 0


def test_tokens_page_chat_template_zh(smol):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["lang"] = "zh"
    at.session_state["chat"] = True
    at.session_state["prompt"] = "苹果<b>很好吃</b>"
    at.switch_page("pages/tokens.py")
    at.run()
    assert not at.exception and not at.error
    chips = next(m.value for m in at.markdown if m.value.startswith("<div"))
    assert "&lt;" in chips and "<b>" not in chips and "</b>" not in chips  # markup shown, never rendered
    assert chips.count("特殊 Token") >= 5  # <|im_start|> ×3, <|im_end|> ×2
    assert "对话模板" in " ".join(i.value for i in at.info)


# ---------------------------------------------------------------------------------------------
# issue 14: widgets that keep their state, links that reopen the view, the whole word, readable maps


def _heads_app(lang: str = "en", **qp):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.session_state["lang"] = lang
    for k, v in qp.items():
        at.query_params[k] = v
    at.switch_page("pages/heads.py")
    at.run()
    return at


def _qp(at, name):
    v = at.query_params.get(name)
    return v[0] if isinstance(v, list) else v


def test_heads_go_to_head_moves_the_sliders_in_the_browser_too(smol):
    """"Go to head" must tell the browser to move the sliders (set_value), not only the server: a
    slider that still shows 0 would send 0 back on the next nudge and jump elsewhere."""
    at = _heads_app()
    at.radio(key="heads_metric").set_value("first_token").run()
    pick = at.selectbox(key="heads_jump_pick").value
    at.button(key="heads_jump_btn").click().run()
    layer, head = at.slider(key="heads_layer"), at.slider(key="heads_head")
    assert (layer.value, head.value) == (pick[0], pick[1])
    assert layer.proto.set_value and head.proto.set_value  # the browser is told the new value
    assert (_qp(at, "layer"), _qp(at, "head")) == (str(pick[0]), str(pick[1]))
    assert at.radio(key="heads_mode").value == "layer" and at.radio(key="heads_metric").value == "first_token"
    at.slider(key="heads_head").set_value((pick[1] + 1) % 9).run()  # the next nudge moves from the head we went to
    assert at.slider(key="heads_layer").value == pick[0]


def test_heads_show_mode_and_metric_survive_a_language_switch_and_relabelling(smol):
    """Streamlit remembers a radio's choice by its label; the labels here name the layer and change
    language, so the page holds the choice and gives it back (and the browser is told)."""
    at = _heads_app()
    at.radio(key="heads_mode").set_value("head").run()
    at.toggle(key="heads_hide").set_value(True).run()
    at.radio(key="heads_metric").set_value("entropy").run()
    at.slider(key="heads_layer").set_value(4).run()  # relabels the mode options ("… layer 4")
    assert at.radio(key="heads_mode").value == "head" and at.radio(key="heads_mode").proto.set_value
    at.session_state["lang"] = "zh"
    at.run()
    assert not at.exception
    assert at.radio(key="heads_mode").value == "head" and at.toggle(key="heads_hide").value is True
    assert at.radio(key="heads_metric").value == "entropy" and at.radio(key="heads_mode").proto.set_value
    assert (_qp(at, "show"), _qp(at, "hide"), _qp(at, "metric")) == ("head", "1", "entropy")


def test_heads_link_reopens_the_view_and_bad_values_are_dropped(smol):
    at = _heads_app(layer="7", head="2", show="head", hide="1", metric="prev_token", pos="3")
    assert not at.exception
    assert (at.slider(key="heads_layer").value, at.slider(key="heads_head").value) == (7, 2)
    assert at.radio(key="heads_mode").value == "head" and at.toggle(key="heads_hide").value is True
    assert at.radio(key="heads_metric").value == "prev_token" and at.slider(key="heads_q").value == 3
    at = _heads_app(layer="999", head="-4", show="<script>", hide="yes", metric="nope", pos="x")
    assert not at.exception and not at.error
    assert (at.slider(key="heads_layer").value, at.slider(key="heads_head").value) == (29, 0)  # clamped
    assert at.radio(key="heads_mode").value == "layer" and at.toggle(key="heads_hide").value is False  # dropped
    assert at.radio(key="heads_metric").value == heads.METRICS[0] and _qp(at, "show") == "layer"


def test_context_follows_every_token_of_the_word(smol):
    """苹果 is four tokens in SmolLM2 (苹 = three bytes, then 果): the page follows all of them."""
    at = _app("context", "en")
    assert not at.exception
    wid = embeddings.word_ids(smol.tokenizer, "苹果")
    assert len(wid) == 4 and at.slider(key="context_n_zh_one").value == 4
    fig = _figs(at)[0]
    curves = [d for d in fig["data"] if d.get("mode") == "lines+markers"]
    assert [d["name"] for d in curves] == ["0·苹‹E8› | 11·苹‹E8›", "1·苹‹8B› | 12·苹‹8B›", "2·苹‹B9› | 13·苹‹B9›", "3·果 | 14·果"]
    one = backends.trace(smol, embeddings.CONTEXT_PAIRS["zh_one"][0])
    for (i, j), d in zip(embeddings.follow_pairs(3, 14, 4), curves):
        floats.assert_same(_arr(d["y"]), embeddings.context_similarity(one.resid, i, one.resid, j), "a followed token's curve")
    table = at.dataframe[0].value  # the table of every followed token comes first
    assert len(table) == 4  # same ids → same embedding rows: each cosine 1 up to a float64 cosine's rounding
    floats.assert_within(table.iloc[:, 2].to_numpy(dtype=float), 1.0, floats.sum_bound(1.0, 2 * smol.facts.d_model + 4, u=floats.U64, routes=1),
                         what="layer 0 of each followed token", why="a float64 cosine of a vector with itself")
    assert embeddings.follow_pairs(1, 5, 4) == [(0, 4), (1, 5)]  # shortened where a prompt has fewer tokens before


def test_pca_labels_face_away_from_their_nearest_neighbour():
    from core.inside import figures as inside_fig

    coords = np.array([[0.0, 0.0], [0.0, 0.05], [1.0, 0.0], [0.95, 1.0]])
    assert inside_fig.label_sides(coords) == ["bottom center", "top center", "middle right", "top center"]
    assert inside_fig.label_sides(np.array([[0.0, 0.0], [0.02, 0.0], [1.0, 1.0]]))[:2] == ["middle left", "middle right"]


def test_tokens_page_long_text_tables_are_whole(smol):
    at = _app("tokens", "en")
    assert not at.exception
    texts = [t.value.to_string() for t in at.table]
    assert any("The cat sat on the mat." in x for x in texts)  # the RAG sentences, in full
    assert any(embeddings.compare_table("en").iloc[0, 1] in x for x in texts)  # the comparison table, not cut


def test_ablation_table_makes_whitespace_visible(smol):
    rows = ablation.top_table(smol.tokenizer, np.eye(1, 49152, 198)[0], np.eye(1, 49152, 198)[0], k=1)
    assert rows[0]["token"] == "⏎"  # id 198 is a newline: never a blank cell


def test_ablation_change_said_in_points_not_percent(smol):
    """issue 14: p going 15.22 % → 47.25 % was shown as '+32.04%' (it is +32 points, +210 %); no '-0.00'."""
    assert ablation.points(0.3204) == "+32.04" and ablation.points(-0.00001) == "0.00" and ablation.points(-0.0137) == "-1.37"
    assert ablation.points_text(0.3204, "zh") == "+32.04 个百分点"
    before, after = np.full(49152, 1 / 49152), np.full(49152, 1 / 49152)
    before[504], after[504] = 0.1522, 0.4725
    df = ablation.top_frame(smol.tokenizer, before, after, "en", k=1)
    assert df.columns.tolist()[-1] == "Δp (points)" and df.iloc[0].tolist()[-3:] == ["15.22%", "47.25%", "+32.03"]


def test_overview_maps_stretch_their_colours_and_say_so():
    """issue 14: an overview cell averages b × b weights, so on a 0…1 scale a long prompt's maps were blank
    white squares; the scale now ends at the largest cell drawn, and the note under the map says so."""
    from core.inside import figures as inside_fig
    from core.plot import attnview

    T = 300
    w = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]  # uniform causal rows
    g = heads.head_grid([w, w * 0 + np.eye(T)], ["a", "b"])
    assert not g.view.exact
    fig = inside_fig.fig_head_grid(g.maps, g.titles, [str(i) for i in range(T)], "en", g.cols, g.view)
    assert fig.layout.coloraxis.cmax == float(g.maps.max()) and g.maps.max() < 0.5  # the largest cell itself
    note = inside_fig.map_note(g.view, "zh", g.maps)
    assert f"{float(g.maps.max()):.3f}" in note and "1" in note
    exact = attnview.view(w[:20, :20], None)
    assert exact.exact and inside_fig.fig_head_grid(exact.z[None], ["a"], ["x"] * 20, "en", 1, exact).layout.coloraxis.cmax == 1
    assert inside_fig.map_note(exact, "en") == ""
    single = inside_fig.fig_single_map(g.maps[0], [str(i) for i in range(T)], "t", "en", g.view)
    assert single.data[0].zmax == float(g.maps[0].max()) and "mean" in single.data[0].colorbar.title.text


def test_rms_numbers_read_alike_in_metrics_and_figure():
    """issue 14: the three RMS metrics and the figure's titles under them use the same four decimals
    (it was 0.9997 above and "rms 1" below)."""
    from core.stream import figures as stream_fig
    from core.stream import lens

    x = np.linspace(-1, 1, 8)
    normed = x / np.sqrt(np.mean(x**2) + 1e-3)
    s = lens.NormSteps("RMSNorm", x, x, float(np.sqrt(np.mean(x**2))), 1.0, normed, np.full(8, 0.05), normed * 0.05, 1e-3)
    values = [v for _, v in lens.norm_metrics(s)]
    assert all(len(v.split(".")[1]) == 4 for v in values)
    titles = [a.text for a in stream_fig.fig_norm_steps(s, "en").layout.annotations]
    assert values[0] in titles[0] and values[1] in titles[1] and values[2] in titles[3]


def test_logits_numbers_keep_their_decimals():
    """issue 14: probabilities in the top table all show four decimals (0.1590, not 0.159 above 0.0278),
    the picked token's note too, and the filter figure counts with a thousands separator."""
    import pandas as pd

    from core.stream import candidates
    from core.stream import figures as stream_fig

    logits = np.log(np.array([0.159, 0.0278, 0.8132]))
    df = candidates.top_table(logits, [2, 0, 1], ["a", "b", "c"], "zh")
    shown = df.pipe(lambda d: candidates.top_table_view(d, "zh")).to_string()
    assert "0.1590" in shown and "0.0278" in shown
    assert candidates.pick_note(0, np.array([0.159, 0.841])) == "id 0 · p = 0.1590"
    assert isinstance(df, pd.DataFrame)
    V = 49152
    steps = {"keep": np.ones(V, dtype=bool), "probs": np.full(V, 1 / V), "probs_before": np.full(V, 1 / V)}
    fig = stream_fig.fig_candidates(steps, ["x", "y"], [0, 1], "en")
    assert "49,152" in fig.layout.title.text


def test_anatomy_counts_and_shares_read_alike():
    """issue 14: the block's tensor table counts with separators (as the caption and the chart), and a
    small non-zero share is "<0.1%", not "0.0%"."""
    from core.stream import anatomy
    from core.stream import figures as stream_fig

    rows = [{"name": "mlp.up_proj.weight", "shape": (1536, 576), "params": 884736, "role": "mlp_up"}]
    assert "884,736" in anatomy.block_table_view(anatomy.block_table(rows, "en"), "en").to_string()
    assert stream_fig.share(35_136, 134_515_008) == "<0.1%" and stream_fig.share(0, 10) == "0.0%"
    fig = stream_fig.fig_params({"embed": 134_479_872, "norm": 35_136}, "en")
    assert fig.data[0].text[1] == "35,136 (<0.1%)"


@pytest.mark.parametrize("area", ["inside", "stream", "learn", "maths", "toy", "gen"])
def test_chinese_text_writes_token_capitalised(area):
    """The zh pages write the loanword as "Token" (as 导览, 注意力头, …); code, placeholders and special
    tokens such as <|im_end|> keep their own spelling."""
    import re

    entries = json.loads((ROOT / "assets" / "i18n" / f"{area}.json").read_text(encoding="utf-8"))
    lower = []
    for key, entry in entries.items():
        prose = re.sub(r"`[^`]*`|\{[^}]*\}|<\|[^|]*\|>", "", entry.get("zh", ""))
        if re.search(r"(?<![\w_])token(?![\w_])", prose):
            lower.append(key)
    assert not lower, lower


def test_probe_inputs_have_the_tokenizers_ids_and_the_layers_rows(smol):
    """The exercise's table: IDs from the tokenizer itself, rows from the embedding layer's own forward."""
    E = embeddings.embedding_matrix(smol)
    table = embeddings.probe_table(smol.tokenizer, E, n_ids=1000)
    for (kind, text), row in zip(embeddings.PROBE_INPUTS, table.to_dict("records")):
        ids = smol.tokenizer(text, add_special_tokens=False)["input_ids"]
        assert row["n_ids"] == len(ids) and row["ids"] == str(list(ids)), kind
        if not ids:
            assert kind == "empty" and np.isnan(row["‖E[id0]‖"])
            continue
        with torch.inference_mode():
            layer = smol.model.get_input_embeddings()(torch.tensor(ids)).numpy()  # the layer's own forward
        assert row["E[id0][0]"] == float(layer[0, 0])
        assert row["‖E[id0]‖"] == float(np.linalg.norm(layer[0].astype(np.float64)))
    twice = table.set_index("kind")
    assert twice.loc["twice", "n_ids"] > twice.loc["normal", "n_ids"]


def test_first_deviation_of_one_extra_space(smol):
    tok, E = smol.tokenizer, embeddings.embedding_matrix(smol)
    a, b = embeddings.REGRESSION_PAIR
    ids_a, ids_b = tok(a, add_special_tokens=False)["input_ids"], tok(b, add_special_tokens=False)["input_ids"]
    dev = embeddings.first_deviation(ids_a, E[ids_a], ids_b, E[ids_b])
    want = next(p for p in range(min(len(ids_a), len(ids_b))) if ids_a[p] != ids_b[p])  # the reference, by hand
    assert dev.position == want and (dev.id_a, dev.id_b) == (ids_a[want], ids_b[want])
    assert dev.row_gap == float(np.abs(E[ids_a[want]] - E[ids_b[want]]).max()) > 0
    same = embeddings.first_deviation(ids_a, E[ids_a], list(ids_a), E[ids_a].copy())
    assert same.position is None and same.n_a == len(ids_a)
    short = embeddings.first_deviation(ids_a, E[ids_a], ids_a[:1], E[ids_a[:1]])  # B stops early: deviates at its end
    assert short.position == 1 and short.id_b is None and short.row_gap is None
