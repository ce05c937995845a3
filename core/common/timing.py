"""Timings a class can trust: warm-up, repeated runs, the median and its spread, written once.

Every figure or sentence that shows a time reads a ``Timing``. ``repeat`` runs a function ``warmup``
times untimed, then ``reps`` times timed; the median is what the page shows, the spread (the
interquartile range, and min–max) says how much to trust it, and ``busy`` says when the spread is too
wide for the median to mean much (another program was competing for the cores).

``compare`` phrases "N× faster / slower" the right way round: the ratio is always the larger time
over the smaller one, and the word says which side is quicker.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

BUSY_SPREAD = 0.25  # interquartile range / median above this → "the machine was busy"


@dataclass(frozen=True)
class Timing:
    """Seconds of repeated runs of one thing (at least one sample)."""

    samples: tuple[float, ...]
    warmup: int = 0

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("a Timing needs at least one sample")
        if any(not (s >= 0.0) for s in self.samples):  # also refuses NaN
            raise ValueError("a time cannot be negative or NaN")

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return float(statistics.median(self.samples))

    @property
    def lo(self) -> float:
        return float(min(self.samples))

    @property
    def hi(self) -> float:
        return float(max(self.samples))

    @property
    def q1(self) -> float:
        return _quantile(self.samples, 0.25)

    @property
    def q3(self) -> float:
        return _quantile(self.samples, 0.75)

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def spread(self) -> float:
        """Relative spread: IQR / median (0 for a single sample or a zero median)."""
        m = self.median
        return self.iqr / m if m > 0 else 0.0

    @property
    def busy(self) -> bool:
        """True when the runs disagree too much for the median to be a fair summary."""
        return self.n >= 3 and self.spread > BUSY_SPREAD

    def to_dict(self) -> dict[str, Any]:
        return {"samples": list(self.samples), "warmup": self.warmup, "median": self.median,
                "q1": self.q1, "q3": self.q3, "min": self.lo, "max": self.hi, "busy": self.busy}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timing:
        return cls(tuple(float(s) for s in d["samples"]), int(d.get("warmup", 0)))


def _quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default), without numpy."""
    s = sorted(xs)
    if len(s) == 1:
        return float(s[0])
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return float(s[lo] + (s[hi] - s[lo]) * (pos - lo))


def repeat(fn: Callable[[], Any], reps: int = 5, warmup: int = 1,
           clock: Callable[[], float] = time.perf_counter) -> tuple[Timing, Any]:
    """(Timing of ``reps`` timed calls after ``warmup`` untimed ones, the last call's result)."""
    if reps < 1 or warmup < 0:
        raise ValueError("reps must be ≥ 1 and warmup ≥ 0")
    result = None
    for _ in range(warmup):
        result = fn()
    samples = []
    for _ in range(reps):
        t0 = clock()
        result = fn()
        samples.append(clock() - t0)
    return Timing(tuple(samples), warmup), result


def gather(fn: Callable[[], Sequence[float]], reps: int = 3, warmup: int = 1) -> Timing:
    """Timing of the seconds ``fn`` measures itself, over ``reps`` calls after ``warmup`` untimed ones.

    For work whose parts are timed inside (each decode step of a generation, timed inside the
    model's lock so that waiting for another session does not count): every call returns its
    samples, and all of them, from every timed call, make the Timing."""
    if reps < 1 or warmup < 0:
        raise ValueError("reps must be ≥ 1 and warmup ≥ 0")
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    for _ in range(reps):
        samples.extend(float(s) for s in fn())
    return Timing(tuple(samples), warmup)


def of(samples: Sequence[float], warmup: int = 0) -> Timing:
    """A Timing of samples measured elsewhere (e.g. the decode steps of one generation)."""
    return Timing(tuple(float(s) for s in samples), warmup)


@dataclass(frozen=True)
class Comparison:
    """How two timings compare: ``ratio`` ≥ 1 always; ``faster`` names the quicker side."""

    a: Timing
    b: Timing
    ratio: float
    faster: str  # "a", "b" or "same"
    notes: list[str] = field(default_factory=list)


SAME_WITHIN = 0.05  # medians within 5 % of each other are "about the same"


def compare(a: Timing, b: Timing) -> Comparison:
    """Compare medians the right way round: "a is N× faster than b" means b.median / a.median = N."""
    ma, mb = a.median, b.median
    if ma <= 0 or mb <= 0:
        return Comparison(a, b, 1.0, "same")
    big, small = max(ma, mb), min(ma, mb)
    ratio = big / small
    if ratio < 1 + SAME_WITHIN:
        return Comparison(a, b, ratio, "same")
    return Comparison(a, b, ratio, "a" if ma < mb else "b")


def ms(seconds: float) -> str:
    """A time for a caption: '12.3 ms', '1.74 ms' and '0.052 ms' below 10 ms, '1.24 s' from a second up."""
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    v = seconds * 1e3
    return f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms" if v >= 0.1 else f"{v:.3f} ms"


def describe(t: Timing) -> str:
    """'40.5 ms (median of 5; IQR 39.8–41.2 ms)' — the language-neutral part of a caption."""
    if t.n == 1:
        return f"{ms(t.median)} (1 run)"
    return f"{ms(t.median)} (median of {t.n}; IQR {ms(t.q1)}–{ms(t.q3)})"
