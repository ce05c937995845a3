"""What each attention head does, summarised from a trace's attention weights.

All functions take ``attn_pattern`` [L, H, T, T] (rows = queries, columns = keys, rows sum to 1,
zero above the diagonal) and return numpy arrays. No model, no Streamlit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

GRID_TOKENS = 48  # positions drawn per small map (the single-query view shows all)
METRICS = ("prev_token", "first_token", "entropy", "max_weight")  # the atlas's metrics, as HeadAtlas names them
SMALLER_IS_SHARPER = {"entropy"}  # metrics whose most telling heads are the lowest


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


def shown(weights: np.ndarray, hide_first: bool) -> np.ndarray:
    """Weights as drawn: float, with the first-token column hidden and rows renormalised if asked."""
    return drop_first_key(weights) if hide_first else weights.astype(float)


@dataclass(frozen=True)
class Grid:
    """The small-multiples view: one map per head of a layer, or per layer for one head."""

    maps: np.ndarray  # [N, T', T'] positions 0 … end−1
    titles: list[str]
    cols: int  # panels per row: a square-ish grid
    end: int  # T': the positions drawn
    n_tokens: int  # T: the prompt's length

    @property
    def clipped(self) -> bool:
        return self.end < self.n_tokens


def head_grid(pattern: np.ndarray, mode: str, layer: int, head: int, kv_head_of: Callable[[int], int], hide_first: bool = False,
              max_len: int = GRID_TOKENS) -> Grid:
    """``mode`` "layer": every head of ``layer`` (titled with the KV head it reads); "head": ``head`` in every layer."""
    L, H, T, _ = pattern.shape
    s, e = window(T, max_len)
    if mode == "layer":
        maps, titles = pattern[layer, :, s:e, s:e], [f"h{h} · KV{kv_head_of(h)}" for h in range(H)]  # [H, T', T']
    else:
        maps, titles = pattern[:, head, s:e, s:e], [f"L{i}" for i in range(L)]  # [L, T', T']
    maps = shown(maps, hide_first)
    return Grid(maps, titles, max(1, math.ceil(math.sqrt(maps.shape[0]))), e, T)


def gqa_args(n_heads: int, n_kv_heads: int) -> dict[str, int]:
    """The fields of heads.gqa_note: query heads, KV heads, and query heads per KV head."""
    return {"H": n_heads, "Hkv": n_kv_heads, "g": n_heads // n_kv_heads}


def query_row(pattern: np.ndarray, layer: int, head: int, query: int, hide_first: bool = False) -> np.ndarray:
    """One query position's weights over every key [T], as drawn."""
    return shown(pattern[layer, head], hide_first)[query]


def best_heads(atlas: HeadAtlas, metric: str, k: int = 10) -> list[tuple[int, int, float]]:
    """The k heads that show ``metric`` most: the highest, or the lowest for entropy (the sharpest)."""
    return top_heads(getattr(atlas, metric), k, largest=metric not in SMALLER_IS_SHARPER)


def head_label(entry: tuple[int, int, float]) -> str:
    """'L3 · h5 — 0.912': one entry of ``top_heads``."""
    return f"L{entry[0]} · h{entry[1]} — {entry[2]:.3f}"


def head_stats(atlas: HeadAtlas, layer: int, head: int) -> dict[str, float]:
    """Sharpness (s) and entropy (e) of one head, for a map's title."""
    return {"s": float(atlas.max_weight[layer, head]), "e": float(atlas.entropy[layer, head])}
