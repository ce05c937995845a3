"""What each attention head does, summarised from a trace's attention weights.

All functions take ``attn_pattern`` [L, H, T, T] (rows = queries, columns = keys, rows sum to 1,
zero above the diagonal) and return numpy arrays. No model, no Streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HeadAtlas:
    """One number per (layer, head), each averaged over the query positions 1 … T−1.

    Position 0 is left out of every mean: with a causal mask it can only look at itself, so its row
    is always [1, 0, 0, …] and says nothing about the head.
    """

    entropy: np.ndarray  # [L, H] mean row entropy, in bits: 0 = all weight on one key
    prev_token: np.ndarray  # [L, H] mean weight on key i−1 ("previous-token head")
    first_token: np.ndarray  # [L, H] mean weight on key 0 (the "attention sink")
    max_weight: np.ndarray  # [L, H] mean of each row's largest weight ("sharpness")


def head_atlas(pattern: np.ndarray) -> HeadAtlas:
    """Entropy, previous-token score, first-token mass and sharpness for every head."""
    L, H, T, _ = pattern.shape
    if T < 2:  # one token: every head trivially looks at itself
        z = np.zeros((L, H))
        return HeadAtlas(z, z.copy(), np.ones((L, H)), np.ones((L, H)))
    entropy, prev, first, sharp = (np.zeros((L, H)) for _ in range(4))
    idx = np.arange(1, T)
    for layer in range(L):  # one layer at a time: [H, T, T] in float64 stays small even at T = 512
        w = np.asarray(pattern[layer], dtype=np.float64)  # [H, T, T]
        rows = w[:, 1:, :]  # [H, T-1, T] queries 1 … T-1
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.where(rows > 0, rows * np.log2(rows), 0.0)
        entropy[layer] = (-plogp.sum(axis=-1)).mean(axis=-1)
        prev[layer] = w[:, idx, idx - 1].mean(axis=-1)  # w[i, i-1]
        first[layer] = w[:, 1:, 0].mean(axis=-1)  # w[i, 0]
        sharp[layer] = rows.max(axis=-1).mean(axis=-1)
    return HeadAtlas(entropy, prev, first, sharp)


def drop_first_key(weights: np.ndarray) -> np.ndarray:
    """Hide the first-token column and renormalise each row over the keys that remain.

    weights [..., T, T] → [..., T, T] with column 0 = NaN (drawn blank). Row 0 has no key left (its
    only visible key is position 0), so it becomes all NaN. Renormalising keeps rows summing to 1,
    so the rest of the map is comparable with other heads; the sink's own mass is shown elsewhere.
    """
    w = np.asarray(weights, dtype=np.float64).copy()
    rest = w[..., 1:]  # [..., T, T-1]
    s = rest.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = np.where(s > 0, rest / s, np.nan)
    w[..., 1:] = rest
    w[..., 0] = np.nan
    return w


def top_heads(values: np.ndarray, k: int = 8, largest: bool = True) -> list[tuple[int, int, float]]:
    """The k (layer, head, value) entries of a [L, H] map, best first."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    order = np.argsort(-flat if largest else flat, kind="stable")[:k]
    H = values.shape[1]
    return [(int(i // H), int(i % H), float(flat[i])) for i in order]


def window(T: int, max_len: int) -> tuple[int, int]:
    """The positions [start, end) drawn in the small-multiples grid: the first ``max_len`` tokens
    (a 30-head grid of 512×512 maps would be 8 M cells; the single-query view shows everything)."""
    return 0, min(T, max_len)
