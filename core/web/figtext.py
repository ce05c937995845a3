"""A figure in words and numbers: its name, a one-sentence summary and its values as tables, read from
the plotly figure itself, so what a screen reader reaches is exactly what is drawn (WCAG 2.1 1.1.1).
Heatmaps give their cells (or the ``TOP`` largest above ``MAX_CELLS``), bars label and value, lines and
points x and y; decorative traces are left out. Pure: no Streamlit here.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from core.common.i18n import t

MAX_CELLS = 2500  # a figure's heatmaps up to 2,500 cells in all are listed whole; larger, each by its TOP largest cells
TOP = 25
MAX_ROWS = 400  # bars or points listed, at most (a note says when more were drawn)
_TAGS = re.compile(r"<[^>]+>")


def plain(text: Any) -> str:
    """A plotly label as plain text: line breaks as spaces, tags dropped, entities read."""
    s = re.sub(r"(?i)<br\s*/?>", " ", "" if text is None else str(text))
    return re.sub(r"\s+", " ", html.unescape(_TAGS.sub("", s))).strip()


@dataclass
class Table:
    caption: str
    frame: pd.DataFrame
    note: str = ""


@dataclass
class FigureText:
    name: str  # the figure's title, as plain text ("" when it has none)
    summary: str  # one sentence: what is drawn and its extremes
    tables: list[Table] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The accessible name: title and summary."""
        return f"{self.name}. {self.summary}" if self.name else self.summary


def _num(x: Any) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return plain(x)
    if not np.isfinite(v):
        return "−∞" if v < 0 else ("∞" if v > 0 else "—")
    return f"{v:.4g}"


def _axis(layout: Any, axis: str) -> Any:
    """The layout's axis object for a trace's axis reference ("x", "x2", "y" …), None if it has none."""
    try:
        return layout[axis[0] + "axis" + axis[1:]]
    except (KeyError, ValueError):
        return None


def _axis_labels(layout: Any, axis: str, values: Sequence[Any]) -> list[str]:
    """The label the figure gives each of ``values`` on ``axis`` ("x", "x2", "y" …): its tick text where
    the axis names positions (tickvals/ticktext), else the value itself."""
    ax = _axis(layout, axis)
    names: dict[Any, str] = {}
    if ax is not None and ax.tickvals is not None and ax.ticktext is not None:
        names = {v: plain(s) for v, s in zip(ax.tickvals, ax.ticktext)}
    return [names.get(v, plain(v)) for v in values]


def _title_of(axis_obj: Any) -> str:
    return plain(axis_obj.title.text) if axis_obj is not None and axis_obj.title is not None else ""


def _decorative(tr: Any) -> bool:
    return getattr(tr, "hoverinfo", None) == "skip" or (tr.type == "scatter" and getattr(tr, "fill", None) == "toself")


def _heatmap(tr: Any, layout: Any, lang: str, whole: bool = True) -> tuple[Table, str]:
    z = np.asarray(tr.z, dtype=np.float64) if tr.z is not None else np.zeros((0, 0))
    z = np.atleast_2d(z)
    R, C = z.shape
    xs = list(tr.x) if tr.x is not None else list(range(C))
    ys = list(tr.y) if tr.y is not None else list(range(R))
    cols = _axis_labels(layout, getattr(tr, "xaxis", None) or "x", xs[:C])
    rows = _axis_labels(layout, getattr(tr, "yaxis", None) or "y", ys[:R])
    finite = np.isfinite(z)
    cap = plain(tr.name) or t("a11y.values", lang)
    if not finite.any():
        return Table(cap, pd.DataFrame()), t("a11y.sum_empty", lang, rows=R, cols=C)
    lo, hi = float(np.nanmin(np.where(finite, z, np.nan))), float(np.nanmax(np.where(finite, z, np.nan)))
    r, c = np.unravel_index(np.nanargmax(np.where(finite, z, -np.inf)), z.shape)
    hidden = int((~finite).sum())
    summary = t("a11y.sum_heatmap", lang, rows=R, cols=C, lo=_num(lo), hi=_num(hi), row=rows[r], col=cols[c])
    if hidden:
        summary += " " + t("a11y.sum_hidden", lang, n=hidden)
    if whole and z.size <= MAX_CELLS:
        text = np.asarray(tr.text, dtype=object) if tr.text is not None and not isinstance(tr.text, str) else None
        cells = ([[plain(s) for s in row] for row in text] if text is not None and text.shape == z.shape  # as the cells say it (✓, −∞)
                 else [[_num(v) for v in row] for row in z])
        frame = pd.DataFrame(cells, index=pd.Index(rows, name=""), columns=cols)
        return Table(cap, frame), summary
    flat = np.where(finite, z, -np.inf).ravel()
    top = np.argsort(flat)[::-1][:TOP]
    frame = pd.DataFrame({t("a11y.col_row", lang): [rows[i // C] for i in top], t("a11y.col_col", lang): [cols[i % C] for i in top],
                          t("a11y.col_value", lang): [_num(flat[i]) for i in top]})
    return Table(cap, frame, t("a11y.note_top", lang, top=len(top), cells=z.size)), summary


def _series(tr: Any, layout: Any, lang: str) -> tuple[Table, str, float, str]:
    """A bar or scatter trace as (table, its name, its largest value, that value's label)."""
    horizontal = getattr(tr, "orientation", None) == "h"
    x = list(tr.x) if tr.x is not None else []
    y = list(tr.y) if tr.y is not None else []
    if not x and y:
        x = list(range(len(y)))
    if not y and x:
        y = list(range(len(x)))
    cat, val = (y, x) if horizontal else (x, y)
    cat_axis = (getattr(tr, "yaxis", None) or "y") if horizontal else (getattr(tr, "xaxis", None) or "x")
    labels = _axis_labels(layout, cat_axis, cat)
    name = plain(tr.name) or t("a11y.values", lang)
    cols: dict[str, list[str]] = {}
    text = getattr(tr, "text", None)
    if text is not None and not isinstance(text, str) and len(text) == len(cat) and tr.type == "scatter":
        cols[t("a11y.col_label", lang)] = [plain(s) for s in text]
    ax_cat = _axis(layout, cat_axis)
    cols[_title_of(ax_cat) or t("a11y.col_at", lang)] = labels
    cols[name] = [_num(v) for v in val]
    frame = pd.DataFrame(cols).head(MAX_ROWS)
    note = t("a11y.note_rows", lang, shown=MAX_ROWS, n=len(cat)) if len(cat) > MAX_ROWS else ""
    nums = np.array([float(v) if isinstance(v, (int, float, np.number)) else np.nan for v in val], dtype=np.float64)
    if np.isfinite(nums).any():
        i = int(np.nanargmax(nums))
        return Table(name, frame, note), name, float(nums[i]), labels[i]
    return Table(name, frame, note), name, float("nan"), ""


_MD_ENTITIES = {c: f"&#{ord(c)};" for c in "[]()!*_`~|$\\:{}#"}


def _cell(x: Any) -> str:
    """Text as itself in the table's HTML: tags as entities, and Markdown's active characters as numeric
    entities too (the same glyphs; no renderer can read ``![x](http…)`` in it as an image or a link)."""
    return "".join(_MD_ENTITIES.get(ch, ch) for ch in html.escape(str(x), quote=True))


def to_html(text: FigureText) -> str:
    """The summary and the tables as HTML: real ``<table>`` markup (a caption, header cells with their
    scope) that a screen reader walks by row and column; every value escaped, as text."""
    parts = [f'<p class="xr-figsummary">{_cell(text.summary)}</p>']
    for tb in text.tables:
        f = tb.frame
        has_index = f.index.name is not None
        head = "".join(f'<th scope="col">{_cell(c)}</th>' for c in ([""] if has_index else []) + list(f.columns))
        rows = []
        for idx, row in zip(f.index, f.itertuples(index=False)):
            first = f'<th scope="row">{_cell(idx)}</th>' if has_index else ""
            rows.append("<tr>" + first + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>")
        note = f'<p class="xr-figsummary">{_cell(tb.note)}</p>' if tb.note else ""
        parts.append(f'<div class="xr-figtable"><table><caption>{_cell(tb.caption)}</caption><thead><tr>{head}</tr></thead>'
                     f'<tbody>{"".join(rows)}</tbody></table></div>{note}')
    return "".join(parts)


def describe(fig: Any, lang: str) -> FigureText:
    """The name, summary and tables of a plotly figure (see the module's note)."""
    layout = fig.layout
    name = plain(layout.title.text) if layout.title is not None else ""
    tables: list[Table] = []
    sentences: list[str] = []
    heat = [tr for tr in fig.data if tr.type == "heatmap" and tr.z is not None]
    # small multiples (a grid of heads) list every cell only while the whole figure stays within MAX_CELLS
    whole = sum(np.size(tr.z) for tr in heat) <= MAX_CELLS
    for tr in fig.data:
        if _decorative(tr):
            continue
        if tr.type == "heatmap":
            table, s = _heatmap(tr, layout, lang, whole)
            tables.append(table)
            sentences.append(s)
        elif tr.type in ("bar", "scatter", "scattergl"):
            table, sname, top, at = _series(tr, layout, lang)
            tables.append(table)
            if np.isfinite(top):
                sentences.append(t("a11y.sum_series", lang, name=sname, n=len(table.frame), top=_num(top), at=at))
    if not tables:
        return FigureText(name, t("a11y.sum_none", lang), [])
    kinds = len(tables)
    summary = " ".join(sentences[:3]) + (" " + t("a11y.sum_more", lang, n=len(sentences) - 3) if len(sentences) > 3 else "")
    summary = (summary + " " + t("a11y.sum_tables", lang, n=kinds)).strip()
    return FigureText(name, summary, tables)
