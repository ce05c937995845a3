"""What of a [T, T] attention map a figure draws: the whole map, averaged into at most ``cells`` ×
``cells`` blocks (the overview), or a window of exact cells. Written once for every page that draws
attention (heads, masks, ablation, the stepper's prefill matrix), so that a 4,096-token prompt never
sends 16 M cells to the browser and every figure says which of the two it shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CELLS = 64  # the most rows/columns a map figure draws
EXACT_UP_TO = CELLS  # a prompt this short is always drawn exactly


@dataclass(frozen=True)
class MapView:
    z: np.ndarray  # [..., n, n] float32: what is drawn (rows = queries, columns = keys)
    start: int  # the first position drawn
    block: int  # each drawn cell is the mean of block × block weights (1: exact weights)
    n_tokens: int  # T of the whole map

    @property
    def n(self) -> int:
        return int(self.z.shape[-1])

    @property
    def exact(self) -> bool:
        return self.block == 1

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.n * self.block >= self.n_tokens

    def span(self, i: int) -> tuple[int, int]:
        """The positions [a, b] (inclusive) behind drawn row/column ``i``."""
        a = self.start + i * self.block
        return a, min(a + self.block, self.n_tokens) - 1

    def positions(self) -> list[int]:
        """The first position behind each drawn row/column."""
        return [self.start + i * self.block for i in range(self.n)]


def block_mean(w: np.ndarray, block: int) -> np.ndarray:
    """[..., T, T] → [..., ceil(T/b), ceil(T/b)]: the mean of each b × b block (the last, partial
    blocks average the weights they hold). Masked weights are zeros and count in the mean."""
    T = w.shape[-1]
    if block <= 1:
        return np.asarray(w, dtype=np.float32)
    n = math.ceil(T / block)
    pad = n * block - T
    lead = w.shape[:-2]
    out = np.empty((*lead, n, n), dtype=np.float32)
    flat_in = np.asarray(w).reshape(-1, T, T)
    flat_out = out.reshape(-1, n, n)
    for i in range(flat_in.shape[0]):  # one map at a time: float32 [T, T] stays ≤ 67 MB at 4,096 tokens
        x = np.pad(flat_in[i].astype(np.float32), ((0, pad), (0, pad)), constant_values=np.nan)
        flat_out[i] = np.nanmean(x.reshape(n, block, n, block), axis=(1, 3))
    return out


def overview(w: np.ndarray, cells: int = CELLS) -> MapView:
    """The whole map, exact when T ≤ ``cells``, else averaged over blocks of ceil(T / cells)."""
    T = w.shape[-1]
    block = max(1, math.ceil(T / cells))
    return MapView(block_mean(w, block), 0, block, T)


def window(w: np.ndarray, start: int, size: int = CELLS) -> MapView:
    """Exact weights of positions start … start + size − 1 (queries and keys), clamped to the map."""
    T = w.shape[-1]
    size = max(1, min(size, T))
    start = max(0, min(int(start), T - size))
    return MapView(np.asarray(w[..., start : start + size, start : start + size], dtype=np.float32), start, 1, T)


def view(w: np.ndarray, start: int | None = None, cells: int = CELLS) -> MapView:
    """``overview`` when ``start`` is None (or the prompt is short), else ``window`` from ``start``."""
    if start is None or w.shape[-1] <= cells:
        return overview(w, cells)
    return window(w, start, cells)


def labels(view: MapView, position_labels: list[str]) -> list[str]:
    """Axis labels of the drawn rows/columns: each position's own label in an exact view, the range of
    positions ("128–191") behind each averaged cell otherwise."""
    if view.exact:
        return list(position_labels[view.start : view.start + view.n])
    return [f"{a}–{b}" for a, b in (view.span(i) for i in range(view.n))]
