"""Small numeric helpers every area shares, written once (numpy only): the softmax (and torch's own, of a
tensor), top-k, entropy, the largest difference and how numbers are said."""

from __future__ import annotations

import math
from typing import Any

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


def softmax_of_tensor(logits: Any, dim: int = -1) -> np.ndarray:
    """torch's own softmax of a tensor, in float64, as a numpy array: where a number is held bit for bit to
    ``torch.softmax(x.double())`` (the model's route). Only a tensor's methods are used, so this module
    stays free of torch."""
    return logits.double().softmax(dim=dim).numpy()


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest scores along the last axis (1-D → [k], [n, V] → [n, k]), highest first;
    ties: the lower index first. Exactly ``np.argsort(-scores, kind="stable")[..., :k]``, without sorting a
    whole vocabulary for a few best: the k-th best value found by partition, then every index at least that
    high, in index order, sorted stably."""
    x = np.asarray(scores)
    k = max(0, min(int(k), x.shape[-1]))
    if x.ndim == 1 and 0 < k < x.shape[-1]:
        kth = -np.partition(-x, k - 1)[k - 1]  # the k-th highest value
        cand = np.flatnonzero(x >= kth)  # all of them, ties at the border included, in index order
        if cand.size >= k:  # (fewer only when NaN is among the best k: then the plain sort below)
            return cand[np.argsort(-x[cand], kind="stable")[:k]].astype(np.int64)
    return np.argsort(-x, axis=-1, kind="stable")[..., :k].astype(np.int64)


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
