"""Small numeric helpers every area shares, written once (numpy only)."""

from __future__ import annotations

import math

import numpy as np


def softmax(x: np.ndarray, axis: int = -1, temperature: float = 1.0) -> np.ndarray:
    """Numerically stable softmax in float64. A row that is entirely −∞ (nothing visible) gives all
    zeros instead of NaN: nothing to read means nothing is read."""
    x = np.asarray(x, dtype=np.float64) / float(temperature)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)  # an all −∞ row: subtract 0, exp gives zeros
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def entropy_bits(probs: np.ndarray) -> float:
    """Shannon entropy in bits: how many yes/no questions the distribution leaves open."""
    p = np.asarray(probs, dtype=np.float64)
    nz = p[p > 0]  # 0 · log 0 = 0
    # never below 0: a one-hot row gives −0.0 (and p a hair over 1 a tiny negative), shown as "-0.00"
    return max(0.0, float(-(nz * np.log2(nz)).sum()))


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest scores of a 1-D array, highest first."""
    scores = np.asarray(scores)
    k = max(0, min(int(k), scores.shape[-1]))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.argpartition(-scores, k - 1)[:k]
    return idx[np.argsort(-scores[idx], kind="stable")].astype(np.int64)


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """The largest |a − b|: how far a recomputation lands from the model's own numbers."""
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


def human_bytes(n: float) -> str:
    """Binary units, three significant figures: 131072 → '128 KiB', 1536 → '1.5 KiB'."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or abs(n) >= 100 else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"  # pragma: no cover


def three_significant(x: float) -> str:
    """A coefficient for a sentence: three significant digits, thousands separated, never in e-notation."""
    if x == 0 or not math.isfinite(x):
        return "0"
    digits = 2 - math.floor(math.log10(abs(x)))  # decimals for three significant digits; negative: round the integer
    return f"{round(x, digits):,.{max(0, digits)}f}"
