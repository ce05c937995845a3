"""The decoding page's pure maths (core.gen.speedups): gguf round trips, KL, top-1 agreement, drift, forks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from core.gen import speedups as S


@pytest.mark.parametrize("qtype", S.QUANT_TYPES)
@pytest.mark.parametrize("shape", [(8, 512), (4, 576)])  # 576: SmolLM2's rows, not a multiple of TQ1_0's 256-block
def test_round_trip_is_gguf_own(qtype, shape):
    rng = np.random.default_rng(0)
    w = rng.standard_normal(shape).astype(np.float32) * 0.05
    got, nbytes = S.quant_round_trip(w, qtype)
    t = GGMLQuantizationType[qtype]
    block, size = GGML_QUANT_SIZES[t]
    rows = w if shape[-1] % block == 0 else w.reshape(-1, block)
    want = quants.dequantize(quants.quantize(rows, t), t).reshape(shape)
    assert got.dtype == np.float32 and got.shape == w.shape
    np.testing.assert_array_equal(got, want)
    assert nbytes == w.size // block * size  # the blocks' own bytes
    assert not np.array_equal(got, w)  # it did quantise


def test_round_trip_refuses_a_tensor_that_is_not_whole_blocks():
    with pytest.raises(ValueError, match="blocks of 256"):
        S.quant_round_trip(np.zeros((6, 576), np.float32), "TQ1_0")


def test_round_trip_error_shrinks_with_bits():
    w = np.random.default_rng(1).standard_normal((16, 512)).astype(np.float32)
    err = {q: float(np.abs(S.quant_round_trip(w, q)[0] - w).mean()) for q in S.QUANT_TYPES}
    assert err["Q8_0"] < err["Q5_1"] < err["Q4_0"] < err["TQ1_0"]
    # Q8_0: one scale per 32 weights, d = max|w| / 127, so no weight moves by more than d / 2 (and float16's rounding of d)
    blocks = w.reshape(-1, 32)
    d = np.abs(blocks).max(-1, keepdims=True) / 127
    assert (np.abs(S.quant_round_trip(w, "Q8_0")[0].reshape(-1, 32) - blocks) <= d * 0.5 + d * 2**-10 * 127).all()


def test_kl_and_agreement_by_hand():
    a = np.array([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0], [3.0, -1.0, 2.9]])
    b = np.array([[1.1, 1.9, 0.4], [0.0, 0.0, 0.0], [2.8, -1.0, 3.0]])
    for i in range(3):
        pa = [math.exp(x) / sum(math.exp(y) for y in a[i]) for x in a[i]]
        pb = [math.exp(x) / sum(math.exp(y) for y in b[i]) for x in b[i]]
        hand = sum(p * (math.log(p) - math.log(q)) for p, q in zip(pa, pb, strict=True))
        assert S.kl_rows(a, b)[i] == pytest.approx(hand, rel=1e-12, abs=1e-15)
    assert S.kl_rows(a, a).tolist() == [0.0, 0.0, 0.0]
    assert (S.kl_rows(a, b) >= 0).all()
    assert S.top1_agree(a, b).tolist() == [True, True, False]  # row 1: all equal, argmax 0 on both sides


def test_kl_is_shift_invariant_and_large_logits_stay_finite():
    a = np.array([[1000.0, 0.0, -1000.0]])
    b = a + 50.0  # the same distribution
    assert S.kl_rows(a, b)[0] == pytest.approx(0.0, abs=1e-12)
    assert np.isfinite(S.kl_rows(a, np.array([[0.0, 1000.0, 0.0]]))).all()


def test_drift_by_hand():
    base = np.array([[[3.0, 4.0], [1.0, 0.0]], [[0.0, 2.0], [0.0, 1.0]]])  # [points, T, D]
    other = base.copy()
    other[1, 0] = [0.0, 3.0]  # |Δ| 1 over |h| 2 → 0.5 at point 1, position 0
    assert S.drift(base, other).tolist() == [0.0, 0.25]


def test_first_fork():
    assert S.first_fork([1, 2, 3], [1, 2, 3]) is None
    assert S.first_fork([1, 2, 3], [1, 5, 3]) == 1
    assert S.first_fork([1, 2, 3], [1, 2]) == 2  # one stopped early
    assert S.first_fork([], []) is None


def test_speculation_counts():
    r = S.SpecResult("lookup", [1, 2], [5, 6, 7, 8, 9], [5, 6, 7, 8, 9],
                     [S.Round((), 0, (5,)), S.Round((6, 7, 4), 2, (6, 7, 8)), S.Round((9, 1), 0, (9,))], 30, 8, 4,
                     plain_seconds=[1.0, 2.0, 1.5], spec_seconds=[0.5, 1.0, 3.0])
    assert (r.drafted, r.accepted, r.acceptance) == (5, 2, 0.4)
    assert (r.verify_passes, r.plain_passes, r.passes_saved) == (3, 5, 2)
    assert r.draft_cost == 0.0 and r.same
    assert r.ratios() == [2.0, 2.0, 0.5] and r.speedup().median == 2.0
    ee = S.SpecResult.from_dict({**r.to_dict(), "method": "early_exit"})
    assert ee.rounds == r.rounds and ee.draft_cost == pytest.approx(5 * 8 / 30)
    assert S.SpecResult("lookup", [1], [2], [2], [S.Round((), 0, (2,))], 30, 8, 4).acceptance is None


def test_shipped_reference_reads_and_holds_together():
    ref = S.load_reference()
    if ref is None:
        pytest.skip("no shipped reference run")
    assert ref.machine and ref.date and set(ref.prompts) == {"copy", "free"}
    for per in ref.speculation.values():
        for r in per.values():
            assert r.same, "a shipped speculative run must equal plain greedy decoding"
            assert [t for rd in r.rounds for t in rd.kept] == r.tokens
            assert all(rd.accepted <= len(rd.drafted) for rd in r.rounds)
    for v in ref.precision.variants:
        assert len(v.kl) == len(ref.precision.prompt_ids) + len(ref.precision.base_tokens) == len(v.agree)
        assert v.fork == S.first_fork(ref.precision.base_tokens, v.tokens)
    assert ref.precision.base_bytes > max(v.weight_bytes for v in ref.precision.variants if v.name != "bf16")


def test_toy_precision_story():
    from core.toy.run import load_trained
    from core.toy.train import induction_report

    toy = load_trained()
    rows = S.toy_precision(toy)
    assert [r.name for r in rows] == ["F32", "Q8_0", "Q4_0"]
    assert rows[0].loss_second_copy == pytest.approx(induction_report(toy.model)["loss_second_copy"], rel=1e-6)
    assert 0 < rows[1].kl_mean < rows[2].kl_mean  # 8 bits move the predictions less than 4
    assert rows[1].top1 >= rows[2].top1 and rows[0].top1 == 1.0
    assert len(S.LIVE) == 0


def test_a_round_reads_accepted_then_the_models_own_then_rejected():
    rd = S.Round(drafted=(5, 6, 7), accepted=1, kept=(5, 9))
    assert rd.marked() == [(5, "accepted"), (9, "model"), (6, "rejected"), (7, "rejected")]
    assert S.Round(drafted=(), accepted=0, kept=(4,)).marked() == [(4, "model")]
