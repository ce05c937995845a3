"""The attention lab's maths (core.maths.attention, core.maths.positions) against independent references:
torch SDPA, hand computations, the tutorials' numbers, and the real SmolLM2 trace; plus every
maths page under AppTest in both languages."""

from __future__ import annotations

import math

import floats
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers.attention_lab import _clock, _weight_error

from core.engine.types import kv_bytes
from core.maths import attention as A
from core.maths import figures as PM
from core.maths import positions as R
from core.plot import palette


def _attention_error(q, k, v, mask=None, scale=None, u: float = floats.U64) -> np.ndarray:
    """Elementwise: how far one route's softmax(q·kᵀ·scale)·v lies from the exact output: the weights'
    error (``_weight_error``) through |v|, and the T_k-term sum's γ_{T_k} Σ w |v|."""
    w, dw = _weight_error(q, k, mask, scale, u)
    av = np.abs(np.asarray(v, dtype=np.float64))
    return dw @ av + floats.gamma(k.shape[-2], u) * (w @ av)


# ---------------------------------------------------------------------------------------------
# the five steps


def test_worked_example_matches_hand_numbers():
    ex = A.worked_example()
    s = A.attention_steps(ex["q"], ex["k"], ex["v"], ex["mask"])
    floats.assert_same(s.scores, [[1.0, 0.0, 1.0]], "scores of small integers: exact")
    # float64, a product with a rounded 1/√2 both ways: assert_allclose's rtol 1e-7 is ~10⁹ × that rounding
    np.testing.assert_allclose(s.scaled[0, :2], [1 / math.sqrt(2), 0.0])
    assert np.isneginf(s.masked[0, 2])
    e = math.exp(1 / math.sqrt(2))
    floats.assert_within(s.weights, [[e / (e + 1), 1 / (e + 1), 0.0]], 2 * _weight_error(ex["q"], ex["k"], ex["mask"])[1],
                         what="the worked example's weights", why="two float64 softmaxes")
    # the tutorial's printed numbers: rtol 1e-7 only absorbs np.round's last bit against the decimal literal
    np.testing.assert_allclose(np.round(s.weights, 2), [[0.67, 0.33, 0.00]])
    np.testing.assert_allclose(np.round(s.output, 2), [[1.34, 0.99]])
    assert s.weights[0, 2] == 0.0  # exactly, despite the value [100, 100]


def test_unmasking_third_key_changes_output_like_sdpa():
    ex = A.worked_example(unmask_third=True)
    s = A.attention_steps(ex["q"], ex["k"], ex["v"], ex["mask"])
    ref = F.scaled_dot_product_attention(*(torch.tensor(ex[n])[None] for n in "qkv"))[0].numpy()
    floats.assert_within(s.output, ref, 2 * _attention_error(ex["q"], ex["k"], ex["v"]), what="unmasked output", why="two float64 routes")
    assert s.output[0, 0] > 40  # the huge value now leaks in
    masked = A.worked_example()
    ref_masked = F.scaled_dot_product_attention(*(torch.tensor(masked[n])[None] for n in "qkv"),
                                                attn_mask=torch.tensor(masked["mask"]))[0].numpy()
    np.testing.assert_allclose(np.round(ref_masked, 2), [[1.34, 0.99]])


def test_seed42_matches_sdpa_causal():
    ex = A.seed42_example()
    assert ex["q"].shape == (1, 4, 8)
    torch.manual_seed(42)  # the tutorial's own code path, global seed
    q, k, v = torch.randn(1, 4, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 8)
    np.testing.assert_array_equal(ex["q"], q.numpy())
    np.testing.assert_array_equal(ex["v"], v.numpy())
    s = A.attention_steps(ex["q"], ex["k"], ex["v"], ex["mask"])  # batched [1, 4, 8]
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()
    # torch's float32 SDPA against numpy's float64 on the same float32 inputs: one route each
    bound = sum(_attention_error(ex["q"], ex["k"], ex["v"], ex["mask"], u=u) for u in (floats.U32, floats.U64))
    floats.assert_within(s.output, ref, bound, what="seed-42 output", why="float32 SDPA and float64 attention")
    w = s.weights[0]
    assert (w[0] > 0).sum() == 1 and w[0, 0] == 1.0
    assert [(row > 0).sum() for row in w] == [1, 2, 3, 4]
    # float64: the softmax's 4-term sum and division, and this 4-term sum
    floats.assert_within(w.sum(-1), 1.0, floats.sum_bound(1.0, 2 * 4 + 3, u=floats.U64, routes=1), what="row sums", why="float64 rounding")
    np.testing.assert_array_equal(np.triu(w, 1), 0.0)


def test_attention_steps_batched_heads_and_scale_off():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((2, 3, 5, 16)), rng.standard_normal((2, 3, 7, 16)), rng.standard_normal((2, 3, 7, 4))
    s = A.attention_steps(q, k, v, scale=1.0)
    ref = F.scaled_dot_product_attention(*(torch.tensor(x) for x in (q, k, v)), scale=1.0).numpy()
    floats.assert_within(s.output, ref, 2 * _attention_error(q, k, v, scale=1.0), what="batched heads", why="two float64 routes")
    assert s.scores.shape == (2, 3, 5, 7) and s.scale == 1.0
    floats.assert_same(A.attention_steps(q, k, v).scaled, s.scores / 4.0, "× 1/√16 = ÷ 4, a power of two: exact")


def test_fully_masked_row_gives_zeros_not_nan():
    s = A.attention_steps(np.ones((2, 2)), np.ones((3, 2)), np.ones((3, 2)), np.array([[True, False, False], [False] * 3]))
    assert not np.isnan(s.weights).any()
    np.testing.assert_array_equal(s.weights[1], 0.0)


def test_recombine_in_bands_is_the_full_product():
    """recombine_heads leaves out a band's columns past its rows only where all of them are exactly 0: each head's
    output is then the full float64 product up to float64 rounding of a sum of T terms (γ_T · |w| @ |v|), with a
    pattern that is causal, and with one that is not (a non-zero weight above the diagonal keeps its band whole)."""
    rng = np.random.default_rng(7)
    T, H, Hkv, dh, d = 1100, 4, 2, 8, 16
    causal = np.tril(rng.random((H, T, T))).astype(np.float16)
    dense = causal.copy()
    dense[1, 3, T - 1] = 0.25  # above the diagonal, in the first band, in its last column
    v = rng.standard_normal((Hkv, T, dh)).astype(np.float32)
    o = rng.standard_normal((d, H * dh)).astype(np.float32)
    vq = v[A.kv_group_map(H, Hkv)].astype(np.float64)
    for w in (causal, dense):
        got = A.recombine_heads(w, v, o)["per_head"]
        ref = np.einsum("htk,hkd->htd", w.astype(np.float64), vq)
        bound = 2 * floats.gamma(T, floats.U64) * np.einsum("htk,hkd->htd", np.abs(w.astype(np.float64)), np.abs(vq))
        floats.assert_within(got, ref, bound, what="banded per-head outputs", why="float64 sums of the same products")
    assert abs(A.recombine_heads(dense, v, o)["per_head"][1, 3] - A.recombine_heads(causal, v, o)["per_head"][1, 3]).max() > 0.01


# ---------------------------------------------------------------------------------------------
# positions


def test_sinusoidal_formula():
    pe = R.sinusoidal(50, 16)
    assert pe.shape == (50, 16)
    for pos, i in [(0, 0), (7, 3), (49, 7)]:
        a = pos / 10000 ** (2 * i / 16)
        assert R.sinusoidal_entry(pos, i, 16) == (math.sin(a), math.cos(a))  # the scalar formula: the same operations
        # numpy's table: its angle off by ≤ 3u of itself (pow, division) per route, each sin / cos by ≤ 2u (libm's ulp)
        bound = floats.U64 * (6 * a + 4)
        floats.assert_within(pe[pos, 2 * i : 2 * i + 2], [math.sin(a), math.cos(a)], bound, what=f"PE[{pos}, {2 * i}:{2 * i + 2}]",
                             why="two float64 routes of sin / cos")
    np.testing.assert_array_equal(pe[0, 0::2], 0.0)
    np.testing.assert_array_equal(pe[0, 1::2], 1.0)


def test_rope_matches_transformers_apply_rotary():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 8))  # [H, T, dh]
    pos = np.arange(6)
    ang = R.rope_angles(pos, 8, 10000.0)
    emb = np.concatenate([ang, ang], -1)
    cos, sin = torch.tensor(np.cos(emb))[None], torch.tensor(np.sin(emb))[None]
    qr, _ = apply_rotary_pos_emb(torch.tensor(x)[None], torch.tensor(x)[None], cos, sin)
    # x·cos + rotate_half(x)·sin from the same float64 cos / sin: the same operations, the same bits
    floats.assert_same(R.rope_rotate(x, pos, 10000.0), qr[0].numpy(), "RoPE vs transformers")
    # a rotation keeps each pair's length: up to cos² + sin² ≠ 1 by a few u, the rotation's 3u, and two
    # float64 norms of dh terms
    n = np.linalg.norm(x, axis=-1)
    floats.assert_within(np.linalg.norm(R.rope_rotate(x, pos), axis=-1), n, floats.sum_bound(n, x.shape[-1] + 8, u=floats.U64),
                         what="norms after RoPE", why="float64 rotation and norms")


def test_rope_score_depends_only_on_offset():
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal(64), rng.standard_normal(64)
    qk = np.linalg.norm(q) * np.linalg.norm(k)

    def score_error(m: int, n: int) -> float:
        # float64: each angle pos·θ_i is off by ≤ 3u·pos (θ_i ≤ 1), which turns a vector by that much;
        # cos / sin and the rotation add ≤ 8u of its length; the dot product γ_dh ‖q‖‖k‖ (Cauchy–Schwarz)
        return qk * (3 * floats.U64 * (m + n) + 16 * floats.U64 + floats.gamma(64, floats.U64))

    base = R.rope_score(q, k, 5, 2, 100000.0)
    for s in (1, 10, 100, 1000):
        floats.assert_within(R.rope_score(q, k, 5 + s, 2 + s, 100000.0), base, score_error(5, 2) + score_error(5 + s, 2 + s),
                             what=f"score shifted by {s}", why="float64 rotations at two pairs of positions")
    assert abs(R.rope_score(q, k, 5, 4, 100000.0) - base) > 1e-3  # another offset, another score
    table = R.relative_offset_table(q, k, [0, 3], list(range(0, 50, 7)))
    floats.assert_within(table - table[:, :1], 0.0, 2 * score_error(49 + 3, 49), what="scores along a row of one offset",
                         why="float64 rotations, positions < 53")


def test_pair_trajectory_is_a_rotation():
    traj = R.pair_trajectory((1.0, 0.0), np.arange(4), math.pi / 2)
    # float64: k·π/2 is off by ≤ k·π/2·2u (π's rounding, the product), then cos / sin by ≤ 2u and the products by u
    bound = floats.U64 * (np.arange(4)[:, None] * math.pi + 4)
    floats.assert_within(traj, [[1, 0], [0, 1], [-1, 0], [0, -1]], bound, what="quarter turns", why="float64 angles")


# ---------------------------------------------------------------------------------------------
# masks, heads, cost


def test_mask_gallery_exact():
    np.testing.assert_array_equal(A.causal_visibility(4), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(A.additive_mask(A.causal_visibility(2)), [[0.0, -np.inf], [0.0, 0.0]])
    pad = A.padding_visibility([4, 2])
    assert pad.shape == (2, 4, 4) and pad[0].all()
    np.testing.assert_array_equal(pad[1], [[1, 1, 0, 0]] * 4)
    np.testing.assert_array_equal(A.causal_padding_visibility([4, 2])[1], [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]])
    assert A.bidirectional_visibility(3).all() and A.cross_visibility(2, 5).shape == (2, 5)
    np.testing.assert_array_equal(A.sliding_window_visibility(5, 2),
                                  [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]])
    g = A.mask_gallery(4, (4, 2), 2)
    assert [p.key for p in g["padding"]] == ["padding_a", "padding_b"] and g["cross"][0].visible.shape == (4, 5)
    # the English gallery is labelled in English, the Chinese one in Chinese
    assert g["causal"][0].rows == ["0·I", "1·like", "2·artificial", "3·intelligence"]
    assert A.mask_gallery(4, lang="zh")["causal"][0].rows == ["0·我", "1·喜欢", "2·人工", "3·智能"]


def test_sliding_window_matches_sdpa_with_mask():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((6, 4)) for _ in range(3))
    vis = A.sliding_window_visibility(6, 3)
    ref = F.scaled_dot_product_attention(*(torch.tensor(x) for x in (q, k, v)), attn_mask=torch.tensor(vis)).numpy()
    floats.assert_within(A.attention_steps(q, k, v, vis).output, ref, 2 * _attention_error(q, k, v, vis), what="sliding window",
                         why="two float64 routes")


def test_gqa_grouping_and_kv_bytes():
    np.testing.assert_array_equal(A.kv_group_map(28, 4), np.repeat(np.arange(4), 7))
    np.testing.assert_array_equal(A.kv_group_map(9, 3), [0, 0, 0, 1, 1, 1, 2, 2, 2])
    assert A.kv_sharing_matrix(9, 3).sum(axis=1).tolist() == [3, 3, 3]
    assert A.kv_sharing_matrix(8, 1).all()
    # SmolLM2: 2 × 30 × 3 × 64 × 2 bytes = 23,040 B per token; same as ModelFacts at fp16
    assert kv_bytes(30, 3, 64, 1, 2) == 2 * 30 * 3 * 64 * 2  # 23,040 B
    assert kv_bytes(24, 2, 64, 1000, 2) == 2 * 24 * 2 * 64 * 2 * 1000
    smol = A.HEAD_CONFIGS[0]
    assert (smol.dh, smol.group_size, smol.kind) == (64, 3, "GQA")
    big = A.HEAD_CONFIGS[2]
    assert (big.dh, big.kind) == (128, "MHA")
    assert A.multihead_shapes(smol, 7)[-2] == ("concat", "[7, 9 × 64 = 576]")
    df = A.kv_table(A.HEAD_CONFIGS, 4096, 2, "zh")
    assert df.iloc[0, 6] == 23_040 and df.iloc[0, 7] == 23_040 * 4096 / 2**20  # MiB: a division by a power of two, exact


def test_score_elements_from_the_tutorial():
    assert A.score_elements(4096) == 16_777_216
    assert A.score_elements(8192) == 67_108_864
    df = A.cost_table([1024, 2048, 4096])
    assert df.iloc[1:, 2].tolist() == [4.0, 4.0]


def test_scale_experiment_std_sqrt_d_and_saturation():
    res = A.scale_experiment([4, 64, 1024], n_trials=300)
    # not rounding: the sample std of 300 dot products is off by ≈ 1/√600 ≈ 4 % of itself; 0.08 is two of those
    # (a fixed seed: the same samples everywhere)
    np.testing.assert_allclose(res["dot_std"], np.sqrt([4, 64, 1024]), rtol=0.08)
    assert res["max_unscaled"][2] > 0.85 > res["max_unscaled"][0]
    assert abs(res["max_scaled"][2] - res["max_scaled"][0]) < 0.05
    assert res["ent_unscaled"][2] < res["ent_scaled"][2]


def test_time_attention_measures_something():
    t = A.time_attention([64, 256], reps=1)
    assert (t["ms"] > 0).all() and t["elements"].tolist() == [4096.0, 65536.0]


def test_time_attention_is_a_median_of_interleaved_runs():
    """Round after round, every length once: a busy spell hits all lengths, and the curve shows the
    median of each length's runs (not the best), with its interquartile range and the busy flag."""
    # call order: (round 0: n=64, n=128), (round 1: …), (round 2: …)
    t = A.time_attention([64, 128], reps=3, clock=_clock([1.0, 10.0, 5.0, 50.0, 3.0, 30.0]))
    assert t["ms"].tolist() == [3000.0, 30000.0]  # length-major order would give 5 s and 50 s; the best, 1 s and 10 s
    assert t["q1"].tolist() == [2000.0, 20000.0] and t["q3"].tolist() == [4000.0, 40000.0]
    assert t["min"].tolist() == [1000.0, 10000.0] and t["max"].tolist() == [5000.0, 50000.0]
    assert t["reps"] == 3 and [x.n for x in t["timings"]] == [3, 3] and t["busy"]  # IQR / median = 2/3 > 25 %
    calm = A.time_attention([64, 128], reps=3, clock=_clock([1.0, 2.0, 1.01, 2.01, 1.02, 2.02]))
    assert not calm["busy"] and not any(x.busy for x in calm["timings"])
    with pytest.raises(ValueError):
        A.time_attention([64], reps=0)


def test_cost_figure_draws_the_spread_as_error_bars():
    n, ms = np.array([128.0, 256.0]), np.array([2.0, 8.0])
    fig = PM.complexity_figure(n, ms, "en", q1=np.array([1.5, 7.0]), q3=np.array([3.0, 8.5]))
    bars = fig.data[1].error_y
    assert list(fig.data[1].y) == [2.0, 8.0] and not bars.symmetric
    assert list(bars.array) == [1.0, 0.5] and list(bars.arrayminus) == [0.5, 1.0]
    assert PM.complexity_figure(n, ms, "en").data[1].error_y.array is None  # no spread given: no bars
    # 13 … 300 ms: the axis runs over whole decades, so both its ticks (10, 100, 1,000) are visible
    fig = PM.complexity_figure(n, np.array([13.0, 300.0]), "en")
    assert list(fig.layout.yaxis2.range) == [1.0, 3.0] and list(fig.layout.yaxis2.ticktext) == ["10", "100", "1,000"]


def test_plot_functions_carry_the_numbers():
    fig = PM.mask_figure(A.causal_visibility(3), "t", "zh", additive=True)
    assert fig.data[0].text.tolist() == [["0", "−∞", "−∞"], ["0", "0", "−∞"], ["0", "0", "0"]]
    assert fig.layout.xaxis.title.text == "Key 位置"
    fig = PM.kv_sharing_figure(28, 4, "en")
    assert "7 per group" in fig.layout.title.text
    s = A.attention_steps(*(A.worked_example()[n] for n in ("q", "k", "v", "mask")))
    fig = PM.matrix_figure(s.masked, "m", ["q0"], ["k0", "k1", "k2"], "en")
    assert fig.data[0].text[0][2] == "−∞"


# ---------------------------------------------------------------------------------------------
# issue 14: the calculator keeps what you typed, says why a row differs, draws weights on one scale


def test_weights_figure_fixed_range_and_masked_cells_apart():
    ex = A.worked_example()
    s = A.attention_steps(ex["q"], ex["k"], ex["v"], ex["mask"])
    fig = PM.weights_figure(s.weights, ~np.isfinite(s.masked), "w", ["q0"], ["k0", "k1", "k2"], "en")
    heat, masked = fig.data[0], fig.data[1]
    hatch = next(d for d in fig.data if d.type == "scatter" and d.fill == "toself")
    text = next(d for d in fig.data if d.type == "scatter" and d.mode == "text")
    assert (heat.zmin, heat.zmax) == (0.0, 1.0)  # 0.33 is coloured on every example, never rescaled
    assert np.isnan(np.asarray(heat.z, dtype=float)[0, 2]) and not np.isnan(np.asarray(masked.z, dtype=float)[0, 2])
    assert hatch.fillpattern.shape == "x" and list(hatch.x[:5]) == [1.5, 2.5, 2.5, 1.5, 1.5]  # the masked cell, by pattern too
    assert list(text.text) == ["0.67", "0.33", "×"]  # the masked cell says so
    cells = [palette.scale_at(palette.SEQUENTIAL, 0.67), palette.scale_at(palette.SEQUENTIAL, 0.33), palette.HIDDEN]
    assert all(palette.contrast(ink, c) >= 4.5 for ink, c in zip(text.textfont.color, cells))  # readable on its own cell


def test_cost_table_view_has_no_none_and_readable_numbers():
    df = A.cost_table(A.COST_LENGTHS, "n²", "×")
    html = A.cost_table_view(df).to_html()
    assert "None" not in html and "nan" not in html and "—" in html
    assert "1,073,741,824" in html and "×4" in html  # 32,768² with separators; ×4 per doubling


def test_log_axes_label_the_values_not_the_minor_digits():
    fig = PM.complexity_figure(np.array([1024.0, 2048, 4096, 32768]), np.array([0.5, 2.0, 8.0, 300.0]), "en")
    assert list(fig.layout.xaxis.ticktext) == ["1K", "2K", "4K", "32K"]
    assert list(fig.layout.yaxis2.ticktext) == ["10⁻¹", "1", "10", "100", "1,000"]
    assert fig.layout.yaxis.ticktext[0] == "10⁶"
    fig = PM.scale_figure(A.scale_experiment(A.SCALE_D_VALUES, n_trials=4), "en")
    assert list(fig.layout.xaxis.ticktext) == ["1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1K"]


def test_multihead_kv_table_view_shows_whole_numbers():
    from core.engine.types import HeadGeometry

    cfg = HeadGeometry("M", 32, 32, 8, 128, 4096)
    html = A.kv_table_view(A.kv_table([cfg], 4096, 2, "en")).to_html()
    assert "131,072" in html and "512.0" in html and "2,048.0" in html  # bytes/token, MiB, MiB if MHA


def test_rope_path_labels_do_not_overlap():
    _, traj = R.rope_pair_demo(64, 10000.0, 0)  # the fastest pair: points a radian apart, several laps
    labels = PM._path_labels(traj, 5)
    shown = [i for i, t in enumerate(labels) if t]
    assert 0 in shown and 5 in shown
    r = float(np.hypot(*traj[0]))
    for a in shown:
        for b in shown:
            if a < b:
                assert np.hypot(*(traj[a] - traj[b])) >= 0.22 * r or 5 in (a, b) or 0 in (a, b)


# ---------------------------------------------------------------------------------------------
# issue 14 (classroom-ready): what a projected page must not contradict


def test_english_positions_intro_has_an_english_example():
    from core.common import i18n

    en = i18n.t("positions.intro", "en")
    assert not any("\u4e00" <= ch <= "\u9fff" for ch in en) and "dog" in en
    assert "小明" in i18n.t("positions.intro", "zh")


def test_offset_chart_draws_every_offset_of_the_table_under_it():
    demo = R.relative_demo(64)
    assert {m - n for m, n in R.OFFSET_PAIRS} <= set(demo["offsets"])
    fig = PM.rope_offset_figure(demo["table"], demo["offsets"], demo["shifts"], "en")
    assert "m − n = 3" in [t.name for t in fig.data]


def test_rope_pair_legend_angle_as_the_caption():
    th, traj = R.rope_pair_demo(64, 100000.0, 4)
    fig = PM.rope_pair_figure(traj, 3, th, "en")
    a = f"{3 * th:.4f}"
    assert a in fig.data[-1].name and a in R.pair_caption(64, 4, 3, th, "en")


def test_kv_bytes_figure_in_the_tables_unit_and_names_in_no_language():
    configs = A.head_configs()
    table = A.kv_table(configs, 4096, 2, "zh")
    fig = PM.kv_bytes_figure(configs, 4096, 2, "zh")
    assert fig.layout.yaxis.title.text == "MiB"
    floats.assert_same(fig.data[0].y, table.iloc[:, 7], "the figure's bars: the table's column")
    floats.assert_same(fig.data[1].y, table.iloc[:, 8], "the figure's bars: the table's column")
    assert list(fig.data[0].text) == [f"{x:,.1f}" for x in table.iloc[:, 7]]  # the same text as the table's cells
    assert not [c.name for c in configs if "heads" in c.name]  # a model's name reads the same in English and Chinese


def test_one_row_weights_figure_has_room_for_its_colour_bar():
    """A single query row was 200 px tall: on a projector its colour bar's 0 / 0.5 / 1 overlapped."""
    s = A.attention_steps(**A.worked_example())
    fig = PM.weights_figure(s.weights, ~np.isfinite(s.masked), "w", ["q0"], ["k0", "k1", "k2"], "en")
    assert fig.layout.height >= 260


def test_kv_sharing_groups_have_distinct_soft_colours():
    fig = PM.kv_sharing_figure(9, 3, "en")
    scale = [c for _, c in fig.data[0].colorscale]
    assert len(set(scale)) == 3 and "#000000" not in scale
    assert (fig.data[0].zmin, fig.data[0].zmax) == (0.5, 3.5)
    assert PM.kv_sharing_figure(32, 32, "en").data[0].colorscale  # MHA: 32 groups, colours cycle




# --- the calculator's glue, moved out of pages/attention_lab.py (hand-computed references) ---


def test_preset_example_versions_key_the_editors():
    ex, lab, version, mask_version = A.preset_example("worked")
    assert ex["mask"].tolist() == [[True, True, False]] and (version, mask_version) == ("worked", "workedFalse")
    ex2, _, version2, mask2 = A.preset_example("worked", unmask=True)
    assert ex2["mask"].tolist() == [[True, True, True]] and version2 == version and mask2 == "workedTrue"  # only the mask's editor renews
    assert lab.q == A.calculator_labels(ex).q and lab.k == A.calculator_labels(ex).k
    s, _, v, m = A.preset_example("seed42")
    assert (v, m) == ("seed42", "seed42") and s["q"].ndim == 2  # the batch axis dropped
    with pytest.raises(ValueError):
        A.preset_example("real")


def test_key_window_start_by_hand():
    assert A.key_window_start(64, 63, 64) is None and A.key_window_start(10, 3, 64) is None  # every key fits
    assert A.key_window_start(100, 99, 64) == (36, 36)  # ends at the query: keys 36 … 99
    assert A.key_window_start(100, 10, 64) == (36, 0)  # an early query: the first window
    assert A.key_window_start(100, 70, 64) == (36, 7)  # 70 − 64 + 1


def test_put_rows_and_hidden_mass_by_hand():
    whole = np.arange(12.0).reshape(6, 2)
    out = A.put_rows(whole, slice(2, 4), np.array([[-1.0, -2.0], [-3.0, -4.0]]))
    assert out.tolist() == [[0, 1], [2, 3], [-1, -2], [-3, -4], [8, 9], [10, 11]] and whole[2, 0] == 4.0  # a copy
    w = np.array([[0.5, 0.25, 0.125, 0.125]])  # sums exactly in binary
    assert A.hidden_mass(w, slice(1, 3)) == 0.625 and A.hidden_mass(w, slice(None)) == 0.0


def test_implementation_rows_by_hand():
    c = {"max_err": {"sdpa": 1.5e-7, "eager": 3e-7, "tiled": 6e-7}, "float32_error": 3e-7}
    assert A.implementation_rows(c) == [("sdpa", "1.50e-07", "0.50×"), ("eager", "3.00e-07", "1.00×"), ("tiled", "6.00e-07", "2.00×")]
