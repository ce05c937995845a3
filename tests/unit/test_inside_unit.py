"""Inside the real model: tokens & embeddings, same token in two contexts, attention heads, ablation.

Every number the four pages show is checked here against an independent computation (torch,
a hand-worked example, or a model whose weights were edited by hand)."""

from __future__ import annotations

import copy
import json
import threading

import floats
import numpy as np
import pytest
import torch
from helpers.inside import _no_hooks, _plain_probs

from conftest import ROOT
from core.engine import roles, tokens
from core.inside import ablation, embeddings, heads
from core.web import chips


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


def test_chips_escape_html():
    h = chips.chips_html(["<script>", " a&b"], [5, 6], kinds=["user", "special"])
    assert "<script>" not in h and "&lt;script&gt;" in h and "␣a&amp;b" in h


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


def test_pca_labels_face_away_from_their_nearest_neighbour():
    from core.inside import figures as inside_fig

    coords = np.array([[0.0, 0.0], [0.0, 0.05], [1.0, 0.0], [0.95, 1.0]])
    assert inside_fig.label_sides(coords) == ["bottom center", "top center", "middle right", "top center"]
    assert inside_fig.label_sides(np.array([[0.0, 0.0], [0.02, 0.0], [1.0, 1.0]]))[:2] == ["middle left", "middle right"]


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
