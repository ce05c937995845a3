"""Helpers shared by the tiers of test_diagnose's tests (tests/*/test_diagnose*.py)."""

from __future__ import annotations

from core.common import timing
from core.gen import diagnose as dg


def _curve(ns, a=0.01, b=2e-4, c=3e-8, tpot=(0.02, 3e-6)):
    """Points whose prefill medians lie exactly on a + b·n + c·n² and decode medians on the TPOT line
    (``tpot`` None: no decode step timed); three samples each, the median in the middle."""
    def tm(x):
        return timing.of([0.98 * x, x, 1.03 * x])
    return [dg.PrefillPoint(n, tm(1e-4 + 1e-7 * n), tm(a + b * n + c * n * n), None if tpot is None else tm(tpot[0] + tpot[1] * n))
            for n in ns]


def _run(steps=(0.02, 0.03, 0.025)):
    """One request measured elsewhere: 5 prompt tokens, len(steps) decode steps."""
    decode = timing.of(steps)
    return dg.DecodeRun(5, len(steps), timing.of([0.001] * 5), timing.of([0.1, 0.11, 0.12]), list(steps), decode,
                        list(range(5, 6 + len(steps))), 4096, 5 + len(steps))
