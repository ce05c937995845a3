"""core.common.timing, the one timing helper: medians, spreads, the busy flag and comparisons the
right way round — all with made-up clocks and samples, never a real timed assertion."""

from __future__ import annotations

import itertools

import pytest

from core.common import timing
from core.common.timing import Timing


def test_median_quartiles_and_spread_by_hand():
    t = Timing((0.010, 0.012, 0.011, 0.013, 0.030))
    # float64 on a handful of made-up samples: pytest.approx's rel 1e-6 is ~10⁹ × their rounding
    assert t.n == 5 and t.median == pytest.approx(0.012)
    assert t.q1 == pytest.approx(0.011) and t.q3 == pytest.approx(0.013)  # numpy's linear quantiles
    assert t.lo == 0.010 and t.hi == 0.030
    assert t.spread == pytest.approx(0.002 / 0.012)
    assert not t.busy  # one outlier does not move the median nor the IQR much


def test_busy_when_the_runs_disagree():
    assert Timing((0.010, 0.020, 0.040, 0.080)).busy
    assert not Timing((0.5, 2.0)).busy  # too few runs to call it either way
    assert not Timing((0.040,)).busy and Timing((0.040,)).spread == 0.0


def test_refuses_empty_negative_and_nan():
    with pytest.raises(ValueError):
        Timing(())
    with pytest.raises(ValueError):
        Timing((0.1, -0.1))
    with pytest.raises(ValueError):
        Timing((float("nan"),))


def test_repeat_warms_up_then_times_with_the_clock():
    calls = []
    ticks = itertools.count(0.0, 0.5)  # every clock reading is 0.5 s after the last
    t, result = timing.repeat(lambda: calls.append(1) or len(calls), reps=3, warmup=2, clock=lambda: next(ticks))
    assert len(calls) == 5 and result == 5  # 2 untimed + 3 timed calls; the last call's result
    assert t.samples == (0.5, 0.5, 0.5) and t.warmup == 2


def test_gather_concatenates_the_samples_each_call_measures():
    runs = iter([[9.0, 9.0], [0.1, 0.2], [0.3, 0.4]])  # the first (warm-up) run is thrown away
    t = timing.gather(lambda: next(runs), reps=2, warmup=1)
    assert t.samples == (0.1, 0.2, 0.3, 0.4) and t.warmup == 1
    with pytest.raises(ValueError):
        timing.gather(lambda: [0.1], reps=0)


@pytest.mark.parametrize(("a", "b", "faster", "ratio"), [
    ((0.1,), (1.0,), "a", 10.0),  # a took a tenth of b's time: a is 10× faster
    ((1.968,), (0.933,), "b", 1.968 / 0.933),  # the case: never "0.5× longer"
    ((0.100,), (0.102,), "same", 1.02),
])
def test_compare_is_the_right_way_round(a, b, faster, ratio):
    c = timing.compare(Timing(a), Timing(b))
    # a float64 ratio of two made-up times: pytest.approx's rel 1e-6 ≫ a division's rounding
    assert c.faster == faster and c.ratio == pytest.approx(ratio) and c.ratio >= 1.0


def test_round_trip_and_describe():
    t = Timing((0.040, 0.041, 0.043), warmup=1)
    assert timing.Timing.from_dict(t.to_dict()) == t
    assert timing.describe(t) == "41.0 ms (median of 3; IQR 40.5 ms–42.0 ms)"
    assert timing.describe(Timing((1.5,))) == "1.50 s (1 run)"


def test_ms_keeps_small_times_readable():
    assert [timing.ms(s) for s in (2.345, 0.0405, 0.00174, 0.000052)] == ["2.35 s", "40.5 ms", "1.74 ms", "0.052 ms"]
