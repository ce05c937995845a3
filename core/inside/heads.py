"""What each attention head does, summarised from a trace's attention weights.

Functions take attention weights (rows = queries, columns = keys, rows sum to 1, zero above the
diagonal) one layer [H, T, T] or one map [T, T] at a time — at 4,096 tokens a whole trace's weights
would be 9 GB — and return numpy arrays. No model, no Streamlit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from core.common.numbers import top_k
from core.engine.types import attention_kind
from core.plot import attnview
from core.plot.attnview import MapView

ATLAS_EAGER = 512  # up to this many tokens the atlas (every layer derived) is computed with the page; beyond, on request
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


def layer_metrics(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(entropy, prev_token, first_token, max_weight), each [H], of one layer's weights [H, T, T]."""
    H, T, _ = w.shape
    if T < 2:  # one token: every head trivially looks at itself
        return np.zeros(H), np.zeros(H), np.ones(H), np.ones(H)
    entropy, prev, first, sharp = (np.zeros(H) for _ in range(4))
    idx = np.arange(1, T)
    for h in range(H):  # one head at a time: [T, T] in float64 stays small even at T = 4096 (134 MB)
        rows = np.asarray(w[h, 1:, :], dtype=np.float64)  # [T-1, T] queries 1 … T-1
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.where(rows > 0, rows * np.log2(rows), 0.0)
        entropy[h] = (-plogp.sum(axis=-1)).mean()
        prev[h] = rows[idx - 1, idx - 1].mean()  # w[i, i-1]
        first[h] = rows[:, 0].mean()  # w[i, 0]
        sharp[h] = rows.max(axis=-1).mean()
    return entropy, prev, first, sharp


def head_atlas_of(layers: Iterable[np.ndarray]) -> HeadAtlas:
    """The atlas from one layer's weights [H, T, T] at a time (derived layers need not all be held)."""
    rows = [layer_metrics(w) for w in layers]
    return HeadAtlas(*(np.stack([r[i] for r in rows]) for i in range(4)))


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
    order = top_k(flat if largest else -flat, k)
    H = values.shape[1]
    return [(int(i // H), int(i % H), float(flat[i])) for i in order]


def shown(weights: np.ndarray, hide_first: bool) -> np.ndarray:
    """Weights as drawn: float, with the first-token column hidden and rows renormalised if asked."""
    return drop_first_key(weights) if hide_first else weights.astype(np.float32)


@dataclass(frozen=True)
class Grid:
    """The small-multiples view: one map per head of a layer, or per layer for one head."""

    maps: np.ndarray  # [N, n, n] what each panel draws (see ``view``)
    titles: list[str]
    cols: int  # panels per row: a square-ish grid
    view: MapView  # the whole map averaged into blocks, or a window of exact weights (same for every panel)


def head_grid(weights: Iterable[np.ndarray], titles: Sequence[str], hide_first: bool = False, start: int | None = None) -> Grid:
    """``weights``: N maps [T, T] — every head of one layer, or one head in every layer (one at a time). ``start`` None: the
    whole map (averaged cells beyond ``attnview.CELLS`` positions); else exact weights from ``start``.
    Hiding the first key renormalises the full rows before anything is averaged or cut."""
    views = [attnview.view(shown(w, hide_first), start) for w in weights]
    return Grid(np.stack([v.z for v in views]), list(titles), max(1, math.ceil(math.sqrt(len(views)))), views[0])


def layer_titles(n_heads: int, kv_head_of: Callable[[int], int]) -> list[str]:
    """Panel titles for every head of a layer, with the KV head each reads."""
    return [f"h{h} · KV{kv_head_of(h)}" for h in range(n_heads)]


def head_titles(n_layers: int) -> list[str]:
    """Panel titles for one head in every layer."""
    return [f"L{i}" for i in range(n_layers)]


def gqa_args(n_heads: int, n_kv_heads: int) -> dict[str, int]:
    """The fields of the sharing note: query heads, KV heads, and query heads per KV head."""
    return {"H": n_heads, "Hkv": n_kv_heads, "g": n_heads // n_kv_heads}


def sharing_note(n_heads: int, n_kv_heads: int) -> tuple[str, dict[str, int]]:
    """How this model's query heads share keys and values, worded from its own counts: the i18n key
    (``heads.share_mha``: one KV head each; ``heads.share_mqa``: one KV head for all; ``heads.share_gqa``:
    groups of g) and its fields."""
    kind = attention_kind(int(n_heads), int(n_kv_heads))
    return f"heads.share_{kind.lower()}", gqa_args(int(n_heads), int(n_kv_heads))


def query_row(weights: np.ndarray, query: int, hide_first: bool = False) -> np.ndarray:
    """One query position's weights over every key [T], as drawn (``weights``: one head's [T, T])."""
    row = np.asarray(weights[query : query + 1], dtype=np.float64)  # [1, T]
    return drop_first_key(row)[0] if hide_first else row[0]


def best_heads(atlas: HeadAtlas, metric: str, k: int = 10) -> list[tuple[int, int, float]]:
    """The k heads that show ``metric`` most: the highest, or the lowest for entropy (the sharpest)."""
    return top_heads(getattr(atlas, metric), k, largest=metric not in SMALLER_IS_SHARPER)


def head_label(entry: tuple[int, int, float]) -> str:
    """'L3 · h5 — 0.912': one entry of ``top_heads``."""
    return f"L{entry[0]} · h{entry[1]} — {entry[2]:.3f}"


def head_stats(atlas: HeadAtlas, layer: int, head: int) -> dict[str, float]:
    """Sharpness (s) and entropy (e) of one head, for a map's title."""
    return {"s": float(atlas.max_weight[layer, head]), "e": float(atlas.entropy[layer, head])}
