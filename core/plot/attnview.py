"""What of a [T, T] attention map a figure draws: the whole map averaged into at most ``cells`` × ``cells``
blocks (the overview), or a window of exact cells; written once for every page, so a 4,096-token prompt
never sends 16 M cells to the browser and every figure says which it shows. ``strip`` does the same along
positions (sums for weights, means otherwise), ``row_bars`` is one attention row's bar chart, and
``tick_index`` thins an axis to every k-th label.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.common import i18n
from core.engine.tokens import position_label

CELLS = 64  # the most rows/columns a map figure draws (and the most bars a row figure draws)
TICKS = 24  # the most labelled ticks on a full-width axis: every k-th position, the others in the hover


@dataclass(frozen=True)
class MapView:
    z: np.ndarray  # [..., n, n] float32: what is drawn (rows = queries, columns = keys); [..., n] for a strip
    start: int  # the first position drawn
    block: int  # each drawn cell is the mean of block × block weights (1: exact weights)
    n_tokens: int  # T of the whole map
    summed: bool = False  # a strip's cell is the sum (not the mean) of its block's values
    line: bool = False  # a strip along positions ([..., n]), not a [n, n] map

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


# ---------------------------------------------------------------------------------------------
# strips: one row of weights, or a [rows, T] table of per-position values


def block_reduce(x: np.ndarray, block: int, how: str = "sum") -> np.ndarray:
    """[..., T] → [..., ceil(T/b)]: the sum (``how="sum"``) or mean of each run of b positions along
    the last axis (the last, partial run holds what is left). NaN values (a hidden key) count as 0
    in a sum and are left out of a mean."""
    x = np.asarray(x, dtype=np.float64)
    T = x.shape[-1]
    if block <= 1:
        return x.astype(np.float32)
    n = math.ceil(T / block)
    pad = np.full((*x.shape[:-1], n * block - T), np.nan)
    blocks = np.concatenate([x, pad], axis=-1).reshape(*x.shape[:-1], n, block)  # [..., n, b]
    with warnings.catch_warnings():  # the mean of an all-NaN block warns; its NaN is the right answer
        warnings.simplefilter("ignore", RuntimeWarning)
        out = np.nansum(blocks, axis=-1) if how == "sum" else np.nanmean(blocks, axis=-1)
    return out.astype(np.float32)


def strip(x: np.ndarray, start: int | None = None, cells: int = CELLS, how: str = "sum") -> MapView:
    """Values along positions ([..., T], last axis): all of them when T ≤ ``cells``; else, with
    ``start`` None, the overview (blocks of ceil(T / cells) positions, summed or averaged: ``how``),
    or the exact values of positions start … start + cells − 1 (clamped to the strip)."""
    x = np.asarray(x)
    T = x.shape[-1]
    if start is None or cells >= T:
        block = max(1, math.ceil(T / cells))
        return MapView(block_reduce(x, block, how), 0, block, T, summed=how == "sum" and block > 1, line=True)
    size = max(1, min(cells, T))
    a = max(0, min(int(start), T - size))
    return MapView(np.asarray(x[..., a : a + size], dtype=np.float32), a, 1, T, line=True)


def tick_index(n: int, most: int = TICKS) -> list[int]:
    """Which of ``n`` drawn cells get a tick label: every k-th (k = ceil(n / most)), from the first."""
    return list(range(0, n, max(1, math.ceil(n / max(1, most)))))


def spans(view: MapView) -> list[str]:
    """"a–b" (the positions behind each drawn cell) for an averaged/summed view; each position itself when exact."""
    return [str(a) if a == b else f"{a}–{b}" for a, b in (view.span(i) for i in range(view.n))]


def cell_labels(view: MapView, tokens: Sequence[Any]) -> list[str]:
    """Each drawn row/column's label: its position and token ("17·␣the") when exact, else the
    positions it covers ("128–191"); computed for the drawn cells only (a 4,096-token prompt labels 64)."""
    if view.exact:
        return [position_label(tokens, p) for p in view.positions()]
    return spans(view)


def note(view: MapView, lang: str, rest: float | None = None) -> str:
    """A short line for the figure itself saying what its cells are (empty for the whole exact map or
    strip): averaged blocks, summed blocks, or a window of exact values (``rest``: the weight of the
    row's keys outside a window, for a row of attention weights)."""
    T = view.n_tokens
    if not view.exact:
        kind = "row_summed" if view.summed else ("strip_mean" if view.line else "map_mean")
        return i18n.t(f"attnview.{kind}", lang, b=view.block, T=T)
    if view.whole:
        return ""
    a, b = view.start, view.start + view.n - 1
    if rest is not None:
        return i18n.t("attnview.row_window", lang, a=a, b=b, T=T, rest=f"{rest:.3f}")
    return i18n.t("attnview.strip_window" if view.line else "attnview.map_window", lang, a=a, b=b, T=T)


def titled(title: str, line: str, width: int = 60) -> str:
    """A figure title with the ``note`` line (what its cells are) under it, in smaller type, wrapped at
    about ``width`` characters (a CJK character counts two) so that a half-width figure shows all of it."""
    if not line:
        return title
    return f"{title}<br><sup>{'<br>'.join(wrap(line, width))}</sup>"


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` display columns, broken at a space or after a CJK character."""
    lines, cur, cur_w = [], "", 0
    for piece in re.findall(r"[\u2e80-\u9fff\uff00-\uffef]|[^\s\u2e80-\u9fff\uff00-\uffef]+|\s+", text):
        w = 0 if piece.isspace() else sum(2 if "\u2e80" <= ch <= "\uffef" else 1 for ch in piece)
        if cur_w + w > width and cur.strip():
            lines.append(cur.rstrip())
            cur, cur_w = ("" if piece.isspace() else piece), w
        else:
            cur, cur_w = cur + piece, cur_w + (len(piece) if piece.isspace() else w)
    if cur.strip():
        lines.append(cur.rstrip())
    return lines


def title_top(title: str, base: int = 30, per_line: int = 24) -> int:
    """A top margin that holds every line of a (wrapped, multi-line) figure title."""
    return base + per_line * (title.count("<br>") + 1)


def bar_top(*ys: np.ndarray) -> float:
    """The top of a weight axis: 1 when a bar comes near it, else a little above the tallest bar (a
    window of a long prompt's row holds weights of 0.01: on a 0 … 1 axis they would not show)."""
    tallest = max((float(np.nanmax(y)) for y in ys if np.size(y) and np.isfinite(y).any()), default=1.0)
    return 1.02 if tallest > 0.8 else max(0.02, round(1.15 * tallest, 3))


@dataclass(frozen=True)
class RowBars:
    """What a bar chart of one attention row draws: a bar per key (exact) or per block of keys (the
    block's total weight), centred on the positions it covers; the hover names every bar's token, or
    the block's positions and its strongest key; tick labels on every k-th bar only (none for blocks:
    the position axis numbers itself); ``note``: the line the figure carries about what it shows."""

    view: MapView
    x: list[float]  # [n] where each bar stands on the position axis (a block: the middle of its b positions)
    first: list[int]  # [n] the first key position behind each bar
    y: np.ndarray  # [n] float32 the weight (exact) or the block's total weight
    hover: list[str]  # [n]
    tickvals: list[int] | None  # None: let the axis number itself
    ticktext: list[str] | None
    width: list[float] | None  # [n] each block's width in positions (None: one key per bar, plotly's own width)
    note: str


def row_bars(row: np.ndarray, label_of: Callable[[int], str], start: int | None = None, cells: int = CELLS,
             most: int = TICKS, lang: str = "en") -> RowBars:
    """``row``: one query's weights over the keys it may see ([n_keys]; NaN for a hidden key);
    ``label_of``: a key position's label (``lambda p: position_label(tokens, p)``)."""
    row = np.asarray(row, dtype=np.float64)
    v = strip(row, start, cells, how="sum")
    first = v.positions()
    if v.exact:
        x: list[float] = [float(p) for p in first]
        hover = [label_of(p) for p in first]
        idx = tick_index(v.n, most)
        ticks: tuple[list[int] | None, list[str] | None] = ([first[i] for i in idx], [hover[i] for i in idx])
        rest, width = float(np.nansum(row) - np.nansum(v.z)), None
    else:  # a block: its positions, and the key in it that gets the most weight
        filled = np.nan_to_num(row, nan=-1.0)
        x, hover, width = [], [], []
        for i in range(v.n):
            a, b = v.span(i)
            k = a + int(np.argmax(filled[a : b + 1]))
            x.append(a + (v.block - 1) / 2)  # evenly spaced, so grouped bars keep one width
            width.append(0.9 * v.block)
            hover.append(i18n.t("attnview.block_peak", lang, a=a, b=b, tok=label_of(k), w=f"{row[k]:.3f}")
                         if np.isfinite(row[k]) else f"{a}–{b}")
        ticks, rest = (None, None), 0.0
    return RowBars(v, x, first, v.z, hover, ticks[0], ticks[1], width, note(v, lang, rest))


def future(view: MapView) -> np.ndarray:
    """[n, n] True where every key behind a drawn cell comes after every query behind it: the causal
    mask hides the whole cell (its weights are exactly 0)."""
    first = np.array([view.span(i)[0] for i in range(view.n)])
    last = np.array([view.span(i)[1] for i in range(view.n)])
    return first[None, :] > last[:, None]


def hide_future(z: np.ndarray, view: MapView | None = None) -> np.ndarray:
    """``z`` [..., n, n] with the cells the causal mask hides as NaN (a figure leaves them blank, so the
    triangle reads by lightness against any colour of the scale, not by colour alone); ``view`` None:
    exact positions 0 … n-1."""
    z = np.asarray(z, dtype=np.float32)
    n = z.shape[-1]
    hidden = future(view) if view is not None else np.triu(np.ones((n, n), dtype=bool), 1)
    return np.where(hidden, np.float32(np.nan), z)
