"""core.gen.sampling against hand-made logits and against Hugging Face's own logits processors."""

from __future__ import annotations

import floats
import numpy as np
import pytest

from core.gen.sampling import (
    SamplingConfig,
    apply_repetition_penalty,
    choose,
    filter_steps,
    next_token_distribution,
)


def _hf_probs(logits: np.ndarray, cfg: SamplingConfig, previous_ids=()) -> np.ndarray:
    """The same step done by transformers' processors, in HF's generate() order."""
    import torch
    from transformers import (
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    scores = torch.tensor(logits, dtype=torch.float64)[None, :]
    ids = torch.tensor([list(previous_ids) or [0]], dtype=torch.long)
    if cfg.repetition_penalty != 1.0 and previous_ids:
        scores = RepetitionPenaltyLogitsProcessor(cfg.repetition_penalty)(ids, scores)
    if cfg.temperature != 1.0:
        scores = TemperatureLogitsWarper(cfg.temperature)(ids, scores)
    if cfg.top_k:
        scores = TopKLogitsWarper(cfg.top_k)(ids, scores)
    if cfg.top_p < 1.0:
        scores = TopPLogitsWarper(cfg.top_p)(ids, scores)
    return torch.softmax(scores, dim=-1)[0].numpy()


def _two_softmaxes(z: np.ndarray) -> float:
    """Relative: how far two float64 softmaxes of the same logits ``z`` (−∞ for a dropped token) lie apart:
    each rounds its sum of positive terms (γ_V), each exponent's argument (≤ u × the kept logits' spread),
    each exp (2u) and the division (u)."""
    kept = z[np.isfinite(z)]
    return float(2 * (floats.gamma(len(z), floats.U64) + (kept.max() - kept.min() + 3) * floats.U64))


def test_config_validation():
    with pytest.raises(ValueError):
        SamplingConfig(temperature=0)
    with pytest.raises(ValueError):
        SamplingConfig(top_p=0)
    with pytest.raises(ValueError):
        SamplingConfig(top_p=1.5)
    with pytest.raises(ValueError):
        SamplingConfig(top_k=-1)
    with pytest.raises(ValueError):
        SamplingConfig(repetition_penalty=0)
    SamplingConfig(temperature=0, greedy=True)  # greedy needs no temperature


def test_top_k_hand_made():
    logits = np.array([1.0, 5.0, 3.0, 4.0, 2.0])
    st = filter_steps(logits, SamplingConfig(top_k=2))
    assert st["keep"].tolist() == [False, True, False, True, False]
    e = np.exp([5.0, 4.0])
    got = st["probs"][[1, 3]]
    floats.assert_within(got, e / e.sum(), _two_softmaxes(np.array([5.0, 4.0])) * got, what="top-2 probabilities", why="two float64 softmaxes")
    assert st["probs"][[0, 2, 4]].sum() == 0.0


def test_top_p_hand_made():
    # probabilities 0.5, 0.3, 0.15, 0.05 (logits = log p)
    p = np.array([0.15, 0.5, 0.05, 0.3])
    logits = np.log(p)
    keep = filter_steps(logits, SamplingConfig(top_p=0.78))["keep"]
    assert keep.tolist() == [False, True, False, True]  # 0.5 + 0.3 reaches 0.78
    keep = filter_steps(logits, SamplingConfig(top_p=0.82))["keep"]
    assert keep.tolist() == [True, True, False, True]  # needs the 0.15 too
    keep = filter_steps(logits, SamplingConfig(top_p=0.01))["keep"]
    assert keep.tolist() == [False, True, False, False]  # always at least one


def test_temperature_keeps_ranking():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=50) * 3
    base = filter_steps(logits, SamplingConfig())["probs_before"]
    hot = filter_steps(logits, SamplingConfig(temperature=2.0))["probs_before"]
    cold = filter_steps(logits, SamplingConfig(temperature=0.5))["probs_before"]
    assert (np.argsort(base) == np.argsort(hot)).all() and (np.argsort(base) == np.argsort(cold)).all()
    assert cold.max() > base.max() > hot.max()  # sharper vs flatter, same order


def test_repetition_penalty_rule():
    out = apply_repetition_penalty(np.array([2.0, -2.0, 1.0]), [0, 1, 0], 2.0)
    floats.assert_same(out, [1.0, -4.0, 1.0], "÷ 2 and × 2: exact")


@pytest.mark.parametrize(
    "cfg,prev",
    [
        (SamplingConfig(temperature=0.7), ()),
        (SamplingConfig(top_k=10), ()),
        (SamplingConfig(top_p=0.9), ()),
        (SamplingConfig(temperature=1.3, top_k=40, top_p=0.8), ()),
        (SamplingConfig(temperature=0.8, top_p=0.5, repetition_penalty=1.3), (3, 7, 7, 42)),
        (SamplingConfig(top_k=5, repetition_penalty=0.8), (0, 1, 2)),
    ],
)
def test_matches_hf_processors(cfg, prev):
    rng = np.random.default_rng(0)
    for _ in range(5):
        logits = rng.normal(size=200) * 2.5
        ours = filter_steps(logits, cfg, prev)
        hf = _hf_probs(logits, cfg, prev)
        assert (ours["keep"] == (hf > 0)).all()
        # the same penalty and division by T both ways, then two float64 softmaxes over the kept tokens
        rel = _two_softmaxes(np.where(ours["keep"], ours["scaled"], -np.inf))
        floats.assert_within(ours["probs"], hf, rel * np.maximum(ours["probs"], hf), what=str(cfg), why="two float64 softmaxes")


def test_greedy_and_seeded_choice():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=100)
    assert choose(logits, SamplingConfig(greedy=True)) == int(np.argmax(logits))
    d = next_token_distribution(logits, SamplingConfig(greedy=True))
    assert d[int(np.argmax(logits))] == 1.0 and d.sum() == 1.0
    cfg = SamplingConfig(temperature=1.5, seed=123)
    draws = {choose(logits, cfg) for _ in range(5)}
    assert len(draws) == 1  # same seed → same token
    many = {choose(logits, SamplingConfig(temperature=1.5, seed=s)) for s in range(40)}
    assert len(many) > 3  # different seeds really sample
    # draws follow the distribution: frequencies ≈ probabilities
    g = np.random.default_rng(0)
    probs = next_token_distribution(logits, SamplingConfig(top_k=3))
    counts = np.bincount([choose(logits, SamplingConfig(top_k=3), rng=g) for _ in range(3000)], minlength=100)
    assert set(np.nonzero(counts)[0]) <= set(np.nonzero(probs)[0])
    # not rounding: a frequency of 3000 draws is off by ≤ √(p(1−p)/3000) ≤ 0.0092 (one standard error); 0.04 is 4.4 of
    # those (a fixed seed: the same draws everywhere)
    np.testing.assert_allclose(counts / 3000, probs, atol=0.04)


def test_entropy_bits():
    from core.common.numbers import entropy_bits

    assert entropy_bits(np.full(4, 0.25)) == pytest.approx(2.0)  # float64, four terms: rel 1e-6 ≫ their rounding
    assert entropy_bits(np.array([1.0, 0.0, 0.0])) == 0.0
    assert f"{entropy_bits(np.array([1.0, 0.0, 0.0])):.2f}" == "0.00"  # never "-0.00"
    assert f"{entropy_bits(np.array([1.0 + 1e-12])):.2f}" == "0.00"
    # temperature flattens: entropy rises with T, and the kept set after top-k caps it at log2(k)
    logits = np.random.default_rng(5).normal(size=64) * 3
    hs = [entropy_bits(filter_steps(logits, SamplingConfig(temperature=T))["probs"]) for T in (0.5, 1.0, 2.0)]
    assert hs[0] < hs[1] < hs[2]
    # ≤ log2(8) = 3, up to float64's rounding of the 8 kept probabilities (their softmax) and of −Σ p log2 p
    assert entropy_bits(filter_steps(logits, SamplingConfig(top_k=8, temperature=50))["probs"]) <= 3.0 + floats.sum_bound(3.0, 2 * 8 + 4, u=floats.U64, routes=1)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_logit_lens_caption_agrees_with_the_figure(lang):
    """The caption names the row the figure really draws the model's prediction in (the last layer
    boundary), read off the figure: today the top row; flip the axis and the caption follows."""
    from core.stream import figures as ps

    L1, T = 4, 3
    ids = np.arange(L1 * T).reshape(L1, T)
    probs = np.linspace(0, 1, L1 * T).reshape(L1, T)
    fig = ps.fig_logit_lens(ids, probs, [str(i) for i in ids.ravel()], ["a", "b", "c"], lang)
    y = list(fig.data[0].y)
    assert y[-1] == max(y) == L1 - 1 and fig.layout.yaxis.autorange != "reversed"  # plotly draws the highest y on top
    assert ps.lens_output_row(fig) == "top"
    assert ("**top row**" if lang == "en" else "**最上面一行**") in ps.lens_caption(fig, lang)
    fig.update_yaxes(autorange="reversed")
    assert ps.lens_output_row(fig) == "bottom"
    assert ("**bottom row**" if lang == "en" else "**最下面一行**") in ps.lens_caption(fig, lang)
