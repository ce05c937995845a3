"""Figures for the maths pages (attention calculator, masks, multi-head, positions).

Pure functions: arrays + ``lang`` in, a plotly Figure out; no Streamlit here. Axes carry
positions (so repeated tokens never merge); token text goes in the tick labels and hover.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.common import escape, i18n
from core.engine.types import HeadGeometry
from core.maths.attention import kv_sharing_matrix
from core.plot import attnview, palette

# a mask's cells: visible = mid blue, hidden = light grey under a × pattern (palette.hatch): told apart by
# lightness (2.3:1) and pattern, not by hue (the pale red/green pair they replace turned one olive for deuteranopes)
VISIBLE = "#5e9fd0"
_MASK_COLOURS = [[0.0, palette.HIDDEN], [1.0, VISIBLE]]



def _fmt(x: float) -> str:
    if np.isneginf(x):
        return "−∞"
    if np.isposinf(x):
        return "∞"
    return f"{x:.3g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.1e}"


# A figure's plot area, in px, across the page's main column on a 1280-px screen with the sidebar open
# (``across`` figures share it). A number is written in its cell only if it fits at the projector's
# smallest text (presenter.MIN_FONT, about 0.6 em a character).
PLOT_PX = 640
CELL_FONT = 18


def numbers_fit(texts: object, n_cols: int, across: int = 1) -> bool:
    """Whether the longest of ``texts`` fits a cell of a figure ``n_cols`` cells wide (``across``: figures in a row)."""
    longest = max((len(str(x)) for x in np.asarray(texts, dtype=object).ravel()), default=0)
    return longest * 0.6 * CELL_FONT + 6 <= (PLOT_PX / across - 90) / max(n_cols, 1)


def _ticks(labels: Sequence[object], most: int = attnview.TICKS) -> dict:
    """An array axis labelled on every k-th cell only (at most ``most`` labels): the rest are in the hover."""
    idx = attnview.tick_index(len(labels), most)
    return dict(tickmode="array", tickvals=idx, ticktext=[escape.plot(labels[i]) for i in idx])


def _cell_names(row_labels: Sequence[object], col_labels: Sequence[object]) -> list[list[str]]:
    """"row → column" per cell, for the hover (the labels a thinned axis leaves out)."""
    return [[escape.plot(f"{r} → {c}") for c in col_labels] for r in row_labels]


def matrix_figure(
    values: np.ndarray, title: str, row_labels: Sequence[str], col_labels: Sequence[str], lang: str,
    *, xlabel_key: str = "maths.key_pos", ylabel_key: str = "maths.query_pos", zmid: float | None = None, note: str = "",
    across: int = 1,
) -> go.Figure:
    """A heatmap with every value written in its cell; −∞ cells are grey and say −∞. Many columns (or
    rows): a label on every k-th only (``attnview.tick_index``), every cell's labels in the hover.
    ``note``: the line under the title saying what the cells are (an overview, a window); ``across``: figures
    side by side in the page's row (a number is written only where it fits its cell, ``numbers_fit``)."""
    z = np.asarray(values, dtype=np.float64)
    z = np.atleast_2d(z)
    shown = np.where(np.isfinite(z), z, np.nan)  # −∞ has no colour: left blank (grey background)
    text = [[_fmt(x) for x in row] for row in z]
    cols = list(range(z.shape[1]))
    rows = list(range(z.shape[0]))
    wide = z.shape[1] > 16  # many columns: no number in the cells (hover has it), labels slanted below the map
    fig = go.Figure(
        go.Heatmap(
            z=shown, x=cols, y=rows, text=text, colorscale=palette.DIVERGING if zmid is not None else palette.SEQUENTIAL, zmid=zmid,
            customdata=_cell_names(row_labels, col_labels), hovertemplate="%{customdata}: %{text}<extra></extra>",
        )
    )
    if (~np.isfinite(z)).any():
        fig.add_trace(go.Scatter(**palette.hatch(~np.isfinite(z))))
    if z.size <= 400 and not wide and numbers_fit(text, z.shape[1], across):  # each number in the ink that reads on its cell
        fin = shown[np.isfinite(shown)]
        lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 1.0)
        if zmid is not None:
            half = max(abs(lo - zmid), abs(hi - zmid)) or 1.0
            lo, hi = zmid - half, zmid + half
        fig.add_trace(go.Scatter(**palette.text_layer(shown, np.array(text, dtype=object), cols, rows, lo, hi,
                                                     palette.DIVERGING if zmid is not None else palette.SEQUENTIAL, size=13)))
    fig.update_xaxes(title=i18n.t(xlabel_key, lang), side="bottom" if wide else "top", tickangle=-60 if wide else None, **_ticks(col_labels))
    fig.update_yaxes(title=i18n.t(ylabel_key, lang), autorange="reversed", **_ticks(row_labels))
    full = attnview.titled(title, note, width=110)
    extra = attnview.title_top(full) - attnview.title_top(title)  # room for the note's lines
    place = dict(y=0.995, yanchor="top") if not note else {}  # a title of several lines: plotly centres it in the margin
    fig.update_layout(title=dict(text=full, **place), height=min(720, max(200, 120 + 34 * z.shape[0])) + extra,
                      margin=dict(l=10, r=10, t=(60 if wide else 105) + extra, b=10), plot_bgcolor="#e5e5e5")
    return fig


_MASKED_GREY = palette.HIDDEN


def weights_figure(weights: np.ndarray, masked: np.ndarray, title: str, row_labels: Sequence[str], col_labels: Sequence[str],
                   lang: str, across: int = 1) -> go.Figure:
    """The softmax weights on a fixed colour range 0 … 1 (cividis: dark blue … yellow, so 0.198 is visibly
    coloured on every example, never rescaled away), with the masked cells — exactly 0 — drawn apart: light
    grey, hatched, marked ×. ``across``: figures side by side (numbers only where they fit, ``numbers_fit``)."""
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    hid = np.atleast_2d(np.asarray(masked, dtype=bool))
    rows, cols = list(range(w.shape[0])), list(range(w.shape[1]))
    text = [["×" if hid[i, j] else _fmt(w[i, j]) for j in cols] for i in rows]
    small = w.size <= 400 and numbers_fit(text, w.shape[1], across)  # a number per cell only where it fits (else: the hover)
    names = _cell_names(row_labels, col_labels)
    fig = go.Figure([
        go.Heatmap(z=np.where(hid, np.nan, w), x=cols, y=rows, text=text, colorscale=palette.SEQUENTIAL, zmin=0.0, zmax=1.0,
                   colorbar=dict(title="w"), xgap=1, ygap=1, customdata=names, hovertemplate="%{customdata}: %{text}<extra></extra>"),
        go.Heatmap(z=np.where(hid, 1.0, np.nan), x=cols, y=rows, colorscale=[[0, _MASKED_GREY], [1, _MASKED_GREY]], showscale=False,
                   xgap=1, ygap=1, customdata=names,
                   hovertemplate="%{customdata}: " + i18n.t("attention_lab.masked", lang) + "<extra></extra>"),
    ])
    if hid.any():
        fig.add_trace(go.Scatter(**palette.hatch(hid)))
    if small:  # each cell's number in the ink that reads on its own cell (palette.text_layer)
        fig.add_trace(go.Scatter(**palette.text_layer(np.where(hid, np.nan, w), np.array(text, dtype=object), cols, rows, 0.0, 1.0, size=14)))
    fig.update_xaxes(title=i18n.t("maths.key_pos", lang), side="top", **_ticks(col_labels))
    fig.update_yaxes(title=i18n.t("maths.query_pos", lang), autorange="reversed", **_ticks(row_labels))
    fig.update_layout(title=dict(text=title, y=0.995, yanchor="top"), height=min(720, max(260, 120 + 34 * w.shape[0])),
                      margin=dict(l=10, r=10, t=105, b=10), plot_bgcolor="#ffffff")
    return fig


def _log_ticks(values: Sequence[float]) -> tuple[list[float], list[str]]:
    """Tick positions and readable labels for a log axis over ``values`` (1K, 4K, 32K …): plotly's
    own log ticks label the minor steps "2 3 4 5 …", which reads as nonsense on a projector."""
    vals = sorted({float(v) for v in values})
    return vals, [_si(v) for v in vals]


def _si(v: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1024.0, "K")):
        if v >= div and v % div == 0:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def _decades(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Powers of ten spanning lo … hi as ticks (10⁻¹, 1, 10, 100 …), for a log axis of measurements."""
    a = int(np.floor(np.log10(max(lo, 1e-12))))
    b = int(np.ceil(np.log10(max(hi, 1e-12))))
    vals = [10.0**e for e in range(a, b + 1)]
    return vals, [_pow10(e) for e in range(a, b + 1)]


_SUP = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _pow10(e: int) -> str:
    if 0 <= e <= 3:
        return f"{10**e:,}"
    return "10" + str(e).translate(_SUP)


def compare_row_figure(mine: np.ndarray, model: np.ndarray, col_labels: Sequence[str], lang: str,
                       start: int | None = None) -> go.Figure:
    """One query row: the calculator's weights beside the model's own (bars). Past ``attnview.CELLS``
    keys: the whole row in summed blocks (``start`` None) or a window of exact weights from ``start``;
    the title says which, every bar's key (or block and its strongest key) is in the hover."""
    label_of = lambda p: escape.plot(col_labels[p])  # noqa: E731
    a = attnview.row_bars(mine, label_of, start, lang=lang)
    b = attnview.row_bars(model, label_of, start, lang=lang)
    tip = "%{customdata}<br>" + ("Σ w" if a.view.summed else "w") + " = %{y:.4f}<extra>%{fullData.name}</extra>"
    fig = go.Figure([
        go.Bar(x=a.x, y=a.y, customdata=a.hover, name=i18n.t("attention_lab.fig_mine", lang), hovertemplate=tip),
        go.Bar(x=b.x, y=b.y, customdata=b.hover, name=i18n.t("attention_lab.fig_model", lang), hovertemplate=tip),
    ])
    fig.update_xaxes(title=i18n.t("maths.key_pos", lang))
    if a.tickvals is not None:
        fig.update_xaxes(tickmode="array", tickvals=a.tickvals, ticktext=a.ticktext, tickangle=-45 if len(a.x) > 8 else None)
    fig.update_yaxes(title=i18n.t("attention_lab.fig_weight", lang), range=[0, attnview.bar_top(a.y, b.y)])
    title = attnview.titled(i18n.t("attention_lab.fig_compare", lang), b.note, width=110)
    fig.update_layout(barmode="group", title=title, height=340, margin=dict(l=10, r=10, t=attnview.title_top(title), b=10),
                      legend=dict(orientation="h", yanchor="top", y=0.99, xanchor="right", x=0.99, bgcolor="rgba(255,255,255,0.8)"))
    return fig


def scale_figure(res: dict[str, np.ndarray], lang: str) -> go.Figure:
    """Left: measured std of q·k against √d_k. Right: mean largest softmax weight, unscaled vs scaled."""
    d = res["d"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(i18n.t("attention_lab.fig_std", lang), i18n.t("attention_lab.fig_max", lang)))
    fig.add_trace(go.Scatter(x=d, y=res["dot_std"], mode="markers+lines", name=i18n.t("attention_lab.fig_std_meas", lang)), 1, 1)
    fig.add_trace(go.Scatter(x=d, y=np.sqrt(d), mode="lines", line=dict(dash="dot"), name="√d_k"), 1, 1)
    fig.add_trace(go.Scatter(x=d, y=res["max_unscaled"], mode="markers+lines", name=i18n.t("attention_lab.fig_unscaled", lang)), 1, 2)
    fig.add_trace(go.Scatter(x=d, y=res["max_scaled"], mode="markers+lines", name=i18n.t("attention_lab.fig_scaled", lang)), 1, 2)
    dv, dt = _log_ticks(d)
    for c in (1, 2):
        fig.update_xaxes(type="log", title="d_k", tickmode="array", tickvals=dv, ticktext=dt, row=1, col=c)
    fig.update_yaxes(range=[0, 1.02], row=1, col=2)
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=60, b=10), legend=dict(orientation="h", y=-0.25))
    return fig


def mask_figure(visible: np.ndarray, title: str, lang: str, *, additive: bool = False,
                row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
                xlabel_key: str = "maths.key_pos", ylabel_key: str = "maths.query_pos") -> go.Figure:
    """A visibility matrix as a ✓/× grid, or (additive=True) as the 0/−∞ matrix added to the scores."""
    vis = np.asarray(visible, dtype=bool)
    rows, cols = list(range(vis.shape[0])), list(range(vis.shape[1]))
    text = np.where(vis, "0", "−∞") if additive else np.where(vis, "✓", "×")
    fig = go.Figure(go.Heatmap(
        z=vis.astype(float), x=cols, y=rows, text=text, colorscale=_MASK_COLOURS, zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
        customdata=_cell_names(row_labels if row_labels is not None else rows, col_labels if col_labels is not None else cols),
        hovertemplate="%{customdata}: %{text}<extra></extra>",
    ))
    if (~vis).any():  # the hidden cells by pattern too: above 900 cells the ✓/× are gone
        fig.add_trace(go.Scatter(**palette.hatch(~vis)))
    if vis.size <= 900:  # the symbols on top of the pattern (under it, a hidden cell's × or −∞ was covered)
        fig.add_trace(go.Scatter(**palette.text_layer(np.where(vis, 1.0, np.nan), text.astype(object), cols, rows, 0.0, 1.0,
                                                     _MASK_COLOURS, size=14)))
    fig.update_xaxes(title=i18n.t(xlabel_key, lang), side="top", **_ticks(col_labels if col_labels is not None else cols))
    fig.update_yaxes(title=i18n.t(ylabel_key, lang), autorange="reversed", **_ticks(row_labels if row_labels is not None else rows))
    size = max(200, min(560, 90 + 36 * vis.shape[0]))
    fig.update_layout(title=dict(text=title, y=0.995, yanchor="top"), height=size + 20, margin=dict(l=10, r=10, t=110, b=10))
    return fig


# one soft colour per KV group, neighbours always different (Turbo's ends were near-black and dark red)
_GROUPS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d")


def _group_colours(n: int) -> list[list]:
    """A stepped colour scale: group g (z = g + 1, on zmin 0.5 … zmax n + 0.5) in _GROUPS[g % 8]."""
    out: list[list] = []
    for g in range(n):
        c = _GROUPS[g % len(_GROUPS)]
        out += [[g / n, c], [(g + 1) / n, c]]
    return out


def kv_sharing_figure(n_heads: int, n_kv_heads: int, lang: str) -> go.Figure:
    """[Hkv × H] grid: which query heads read which KV head (one colour per group)."""
    m = kv_sharing_matrix(n_heads, n_kv_heads)
    z = np.where(m, np.arange(n_kv_heads)[:, None] + 1.0, np.nan)  # colour = group id
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(n_heads)), y=list(range(n_kv_heads)), colorscale=_group_colours(n_kv_heads), zmin=0.5,
        zmax=n_kv_heads + 0.5, showscale=False, xgap=2, ygap=2,
        hovertemplate=i18n.t("multihead.fig_hover", lang) + "<extra></extra>",
    ))
    fig.update_xaxes(title=i18n.t("multihead.fig_qheads", lang), dtick=1)
    fig.update_yaxes(title=i18n.t("multihead.fig_kvheads", lang), dtick=1, autorange="reversed")
    fig.update_layout(title=i18n.t("multihead.fig_sharing", lang, h=n_heads, kv=n_kv_heads, g=n_heads // n_kv_heads),
                      height=max(180, 110 + 28 * n_kv_heads), margin=dict(l=10, r=10, t=50, b=10), plot_bgcolor="#f4f4f4")
    return fig


def kv_bytes_figure(configs: Sequence[HeadGeometry], n_tokens: int, bytes_per_value: int, lang: str) -> go.Figure:
    """KV-cache size for ``n_tokens`` tokens, per model, as it is (MHA/GQA/MQA) and if it were MHA: in MiB
    to one decimal, the unit and format of the table above it (``kv_table_view``), so bar and cell agree."""
    names = [c.name for c in configs]
    mib = 1024.0**2
    real = [c.kv_bytes(n_tokens, bytes_per_value) / mib for c in configs]
    mha = [c.with_kv_heads(c.n_heads).kv_bytes(n_tokens, bytes_per_value) / mib for c in configs]
    fig = go.Figure([
        go.Bar(x=names, y=real, name=i18n.t("multihead.fig_actual", lang), text=[f"{x:,.1f}" for x in real], textposition="outside"),
        go.Bar(x=names, y=mha, name=i18n.t("multihead.fig_if_mha", lang), text=[f"{x:,.1f}" for x in mha], textposition="outside"),
    ])
    fig.update_yaxes(title="MiB", tickformat=",~f", range=[0, max(real + mha) * 1.15])  # room for the labels above the bars
    fig.update_layout(barmode="group", title=i18n.t("multihead.fig_bytes", lang, n=f"{n_tokens:,}"), height=400,
                      margin=dict(l=10, r=10, t=70, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.04, xanchor="right", x=1))  # right of the title
    return fig


def sinusoidal_figure(pe: np.ndarray, lang: str) -> go.Figure:
    """The sinusoidal encoding as a position × dimension heatmap."""
    fig = go.Figure(go.Heatmap(z=pe, colorscale=palette.DIVERGING, zmid=0, zmin=-1, zmax=1,
                               hovertemplate=i18n.t("positions.fig_pe_hover", lang) + "<extra></extra>"))
    fig.update_xaxes(title=i18n.t("positions.fig_dim", lang))
    fig.update_yaxes(title=i18n.t("ui.position", lang), autorange="reversed")
    fig.update_layout(title=i18n.t("positions.fig_pe", lang, t=pe.shape[0], d=pe.shape[1]), height=420, margin=dict(l=10, r=10, t=50, b=10))
    return fig


def rope_pair_figure(traj: np.ndarray, pos: int, theta_i: float, lang: str) -> go.Figure:
    """One 2-D pair of q rotating with position: its path, and where it is at ``pos``."""
    r = float(np.hypot(*traj[0]))
    circle = np.linspace(0, 2 * np.pi, 200)
    fig = go.Figure([
        go.Scatter(x=r * np.cos(circle), y=r * np.sin(circle), mode="lines", line=dict(color="#ccc"), hoverinfo="skip", showlegend=False),
        go.Scatter(x=traj[:, 0], y=traj[:, 1], mode="lines+markers+text", line=dict(color="#9ab", width=1), text=_path_labels(traj, pos),
                   textposition=_outward(traj), marker=dict(size=6, color=np.arange(len(traj)), colorscale="Viridis"),
                   customdata=np.arange(len(traj)), hovertemplate="m = %{customdata}<extra></extra>",
                   name=i18n.t("positions.fig_path", lang)),
        go.Scatter(x=[0, traj[pos, 0]], y=[0, traj[pos, 1]], mode="lines+markers", line=dict(width=4, color="crimson"),
                   name=i18n.t("positions.fig_at", lang, p=pos, a=f"{pos * theta_i:.4f}")),  # as many decimals as the caption under it
    ])
    lim = 1.25 * max(r, 1e-9)
    fig.update_xaxes(range=[-lim, lim], zeroline=True, title="x₁")
    fig.update_yaxes(range=[-lim, lim], zeroline=True, scaleanchor="x", title="x₂")
    fig.update_layout(title=dict(text=i18n.t("positions.fig_pair", lang, th=f"{theta_i:.4g}"), y=0.98, yanchor="top"), height=500,
                      margin=dict(l=10, r=10, t=110, b=10), legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig


def _path_labels(traj: np.ndarray, pos: int, min_gap: float = 0.22) -> list[str]:
    """Position numbers on the rotation path, only where they do not land on a label already
    written (points closer than ``min_gap`` × radius skip theirs); 0 and ``pos`` always show."""
    r = max(float(np.hypot(*traj[0])), 1e-12)
    shown: list[int] = []
    for i in [0, pos, *range(1, len(traj))]:
        if i in shown:
            continue
        if i in (0, pos) or all(np.hypot(*(traj[i] - traj[j])) >= min_gap * r for j in shown):
            shown.append(i)
    return [str(i) if i in shown else "" for i in range(len(traj))]


def _outward(traj: np.ndarray) -> list[str]:
    """Each point's label placed away from the circle's centre (outside the ring, off the path)."""
    out = []
    for x, y in traj:
        vert = "top" if y >= 0 else "bottom"
        horiz = "right" if x >= 0 else "left"
        out.append(f"{vert} {horiz}" if abs(x) > 0.3 * abs(y) else f"{vert} center")
    return out


def rope_offset_figure(table: np.ndarray, offsets: Sequence[int], shifts: Sequence[int], lang: str) -> go.Figure:
    """Score of q·k against the shift s of both positions, one line per offset m − n: flat lines."""
    fig = go.Figure([
        go.Scatter(x=list(shifts), y=row, mode="lines+markers", name=f"m − n = {o}") for o, row in zip(offsets, table)
    ])
    fig.update_xaxes(title=i18n.t("positions.fig_shift", lang))
    fig.update_yaxes(title="q·k")
    fig.update_layout(title=i18n.t("positions.fig_offset", lang), height=360, margin=dict(l=10, r=10, t=50, b=10))
    return fig


def complexity_figure(n: np.ndarray, ms: np.ndarray, lang: str, q1: np.ndarray | None = None,
                      q3: np.ndarray | None = None, n_formula: np.ndarray | None = None) -> go.Figure:
    """Score-matrix entries n² (formula, at ``n_formula``: the table's lengths; ``n`` without it) beside the
    measured attention time against n: the median of the timed runs, with their interquartile range
    (``q1`` … ``q3``) as error bars."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(i18n.t("attention_lab.fig_elems", lang), i18n.t("attention_lab.fig_time", lang)))
    nf = np.asarray(n if n_formula is None else n_formula, dtype=float)
    fig.add_trace(go.Scatter(x=nf, y=nf ** 2, mode="markers+lines", name="n²"), 1, 1)
    ms = np.asarray(ms, dtype=float)
    spread = None
    if q1 is not None and q3 is not None:  # asymmetric bars: a median need not sit mid-way in its spread
        spread = dict(type="data", symmetric=False, array=np.asarray(q3, dtype=float) - ms, arrayminus=ms - np.asarray(q1, dtype=float),
                      thickness=1.5, width=6)
    fig.add_trace(go.Scatter(x=n, y=ms, mode="markers+lines", name=i18n.t("attention_lab.fig_ms", lang), error_y=spread,
                             hovertemplate="n = %{x}<br>%{y:.3g} ms<extra></extra>"), 1, 2)
    n2 = nf ** 2
    times = np.concatenate([ms, *(np.asarray(a, dtype=float) for a in (q1, q3) if a is not None)])  # the ticks cover the bars too
    for c, ys, xs in ((1, n2, nf), (2, times, np.asarray(n, dtype=float))):
        nv, nt = _log_ticks(xs)
        fig.update_xaxes(type="log", title=i18n.t("attention_lab.fig_n", lang), tickmode="array", tickvals=nv, ticktext=nt, row=1, col=c)
        yv, yt = _decades(float(np.min(ys[ys > 0])) if np.any(ys > 0) else 1.0, float(np.max(ys)) if len(ys) else 10.0)
        fig.update_yaxes(type="log", tickmode="array", tickvals=yv, ticktext=yt, row=1, col=c)
    # whole decades on the time axis: however narrow the measured range, two labelled ticks are on screen to read it by
    fig.update_yaxes(title="ms", range=[np.log10(yv[0]), np.log10(yv[-1])], row=1, col=2)
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=60, b=10), showlegend=False)
    return fig


def cell_text(x: float) -> str:
    """A calculator table's cell: four decimals, and −∞ (a masked score) written as the maths writes it."""
    if np.isneginf(x):
        return "−∞"
    return f"{x:.4f}"


def matrix_frame(values: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str]):
    """A 2-D array as a labelled DataFrame (for st.dataframe / st.data_editor)."""
    return pd.DataFrame(np.atleast_2d(values), index=list(row_labels), columns=list(col_labels))


# ---------------------------------------------------------------------------------------------
# normalisation (core.maths.norms) and the other position schemes (ALiBi, learned table)


def norm_vector_figure(x: np.ndarray, layer: np.ndarray, rms: np.ndarray, lang: str) -> go.Figure:
    """Top: the vector the norms read, per dimension. Bottom: LayerNorm(x) and RMSNorm(x) on one axis."""
    dims = np.arange(len(x))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(i18n.t("norms.fig_input", lang), i18n.t("norms.fig_outputs", lang)))
    fig.add_trace(go.Scatter(x=dims, y=x, mode="lines", line=palette.line("weights"), name="x",
                             hovertemplate="%{x}: %{y:.4g}<extra>x</extra>"), 1, 1)
    for role, y, name in (("main", layer, "LayerNorm(x)"), ("second", rms, "RMSNorm(x)")):
        fig.add_trace(go.Scatter(x=dims, y=y, mode="lines", line=palette.line(role, width=1.5), name=name,
                                 hovertemplate="%{x}: %{y:.4g}<extra>" + name + "</extra>"), 2, 1)
    fig.update_xaxes(title=i18n.t("positions.fig_dim", lang), row=2, col=1)
    fig.update_layout(height=460, margin=dict(l=10, r=10, t=60, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=-0.3, x=0))
    return fig


def growth_figure(g: dict[str, np.ndarray], sqrt_d: float, lang: str) -> go.Figure:
    """Mean ‖x‖ of the residual stream at each block boundary, one line per norm placement, with √d
    (the size a normalised vector has) as a dotted reference."""
    roles = {"pre": "main", "post": "second"}
    fig = go.Figure([go.Scatter(x=np.arange(len(v)), y=v, mode="lines+markers", line=palette.line(roles[p]),
                                marker=palette.marker(roles[p]), name=i18n.t(f"norms.{p}", lang),
                                hovertemplate=i18n.t("norms.fig_growth_hover", lang) + "<extra></extra>")
                     for p, v in g.items()])
    fig.add_hline(y=sqrt_d, line=dict(color=palette.OKABE_ITO["grey"], dash="dot"),
                  annotation_text=f"√d = {sqrt_d:g}", annotation_position="bottom right")
    fig.update_xaxes(title=i18n.t("norms.fig_boundary", lang))
    fig.update_yaxes(title=i18n.t("norms.fig_norm", lang), rangemode="tozero")
    fig.update_layout(title=i18n.t("norms.fig_growth", lang, n=len(next(iter(g.values()))) - 1), height=380,
                      margin=dict(l=10, r=10, t=60, b=10), legend=dict(orientation="h", yanchor="bottom", y=-0.35, x=0))
    return fig


def stream_norm_figure(norms: np.ndarray, name: str, lang: str) -> go.Figure:
    """The traced model's mean ‖x‖ at each block boundary (before its final norm)."""
    fig = go.Figure(go.Scatter(x=np.arange(len(norms)), y=norms, mode="lines+markers", line=palette.line("main"),
                               marker=palette.marker("main"), name=escape.plot(name),
                               hovertemplate=i18n.t("norms.fig_growth_hover", lang) + "<extra></extra>"))
    fig.update_xaxes(title=i18n.t("norms.fig_boundary", lang))
    fig.update_yaxes(title=i18n.t("norms.fig_norm", lang), type="log")
    fig.update_layout(title=i18n.t("norms.fig_real", lang, name=escape.plot(name)), height=360, margin=dict(l=10, r=10, t=60, b=10))
    return fig


def alibi_slopes_figure(slopes: np.ndarray, lang: str) -> go.Figure:
    """Each head's ALiBi slope m_h (log axis: a geometric sequence is a straight staircase)."""
    fig = go.Figure(go.Bar(x=np.arange(len(slopes)), y=slopes, marker=dict(color=palette.colour("main")),
                           text=[f"{m:.3g}" for m in slopes], textposition="outside",
                           hovertemplate="h = %{x}: m = %{y:.6g}<extra></extra>"))
    fig.update_xaxes(title=i18n.t("ui.head", lang), dtick=1)
    fig.update_yaxes(title="m_h", type="log")
    fig.update_layout(title=i18n.t("positions.fig_slopes", lang, h=len(slopes)), height=320, margin=dict(l=10, r=10, t=60, b=10))
    return fig


def learned_table_figure(table: np.ndarray, lo: int, hi: int, lang: str) -> go.Figure:
    """The learned position table [P, d] as a heatmap, with the rows ``lo`` … ``hi`` − 1 being read marked."""
    P = table.shape[0]
    fig = go.Figure(go.Heatmap(z=table, colorscale=palette.DIVERGING, zmid=0,
                               hovertemplate=i18n.t("positions.fig_pe_hover", lang) + "<extra></extra>"))
    fig.add_shape(type="rect", x0=-0.5, x1=table.shape[1] - 0.5, y0=lo - 0.5, y1=min(hi, P) - 0.5,
                  line=dict(color=palette.INK, width=3))
    fig.update_xaxes(title=i18n.t("positions.fig_dim", lang))
    fig.update_yaxes(title=i18n.t("ui.position", lang), autorange="reversed", range=[P - 0.5, -0.5])
    fig.update_layout(title=i18n.t("positions.fig_learned", lang, p=P, d=table.shape[1]), height=380, margin=dict(l=10, r=10, t=50, b=10))
    return fig


def reach_figure(rnn: np.ndarray, attention: np.ndarray, lang: str) -> go.Figure:
    """‖∂(last output)/∂x_t‖ against t, for a recurrent layer and a self-attention layer (log axis)."""
    t = np.arange(len(rnn))
    fig = go.Figure([
        go.Scatter(x=t, y=rnn, mode="lines+markers", line=palette.line("second"), marker=palette.marker("second"),
                   name=i18n.t("arch.fig_rnn", lang), hovertemplate="t = %{x}: %{y:.3g}<extra></extra>"),
        go.Scatter(x=t, y=attention, mode="lines+markers", line=palette.line("main"), marker=palette.marker("main"),
                   name=i18n.t("arch.fig_attention", lang), hovertemplate="t = %{x}: %{y:.3g}<extra></extra>"),
    ])
    fig.update_xaxes(title=i18n.t("arch.fig_t", lang, last=len(rnn) - 1))
    fig.update_yaxes(title=i18n.t("arch.fig_reach", lang), type="log", exponentformat="power")
    fig.update_layout(title=i18n.t("arch.fig_title", lang), height=380, margin=dict(l=10, r=10, t=60, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=-0.35, x=0))
    return fig
