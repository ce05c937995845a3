"""Figures of the Cause-and-effect pages: the two prompts' next tokens, the patching grids, the
attributions beside the attention. Pure functions: numpy in, plotly Figure out; every label is
translated with the ``lang`` passed in. No Streamlit here.

Axes carry positions (0, 1, 2 …) with the token text in the tick labels and the hover, so a
repeated token never merges two columns (plotly merges repeated category labels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.common import escape, i18n
from core.plot import palette
from core.plot.plotlabels import position_label

ANSWER_COLOUR, FOIL_COLOUR, OTHER_COLOUR = "#dc2626", "#2563eb", "#94a3b8"
# 0 = the corrupted run (white), 1 = the clean run (deep red), below 0 = further from clean (blue)
PATCH_SCALE = [[0.0, "#2563eb"], [0.5, "#ffffff"], [1.0, "#b91c1c"]]



def fig_top_tokens(clean: Sequence[dict], corrupted: Sequence[dict], answer: int, foil: int, lang: str) -> go.Figure:
    """The most likely next tokens after each prompt (probabilities), the answer and the foil coloured."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(i18n.t("cause.fig_top_clean", lang), i18n.t("cause.fig_top_corrupted", lang)),
                        horizontal_spacing=0.18)
    for col, rows in ((1, clean), (2, corrupted)):
        rows = list(rows)[::-1]  # the most likely on top
        colours = [ANSWER_COLOUR if r["id"] == answer else FOIL_COLOUR if r["id"] == foil else OTHER_COLOUR for r in rows]
        fig.add_trace(go.Bar(x=[r["p"] for r in rows], y=[f"{escape.plot(r['token'])}  " for r in rows], orientation="h", marker_color=colours,
                             customdata=[[r["logit"], r["id"]] for r in rows], showlegend=False,
                             hovertemplate="%{y}<br>p = %{x:.2%}<br>logit = %{customdata[0]:.3f}<br>id %{customdata[1]}<extra></extra>"),
                      row=1, col=col)
        fig.update_xaxes(title_text=i18n.t("cause.fig_top_x", lang), tickformat=".0%", row=1, col=col)
    fig.update_layout(height=340, margin=dict(t=50, b=40, l=10, r=10))
    return fig


def _patch_hover(tokens: Sequence[str], n_rows: int, raw: np.ndarray, lang: str, heads: bool) -> np.ndarray:
    cols = raw.shape[1]
    labels = [f"h{c}" for c in range(cols)] if heads else [position_label(tokens, c) for c in range(cols)]
    what = i18n.t("cause.head", lang) if heads else i18n.t("cause.position", lang)
    return np.array([[f"{i18n.t('cause.layer_n', lang, l=r)} · {what} {labels[c]}<br>{i18n.t('cause.hover_ld', lang)} = {raw[r, c]:.3f}"
                      for c in range(cols)] for r in range(n_rows)], dtype=object)


def _restored_bar(title: str, lo: float, lang: str) -> dict[str, Any]:
    """The colour bar of a normalised grid: its two ends named on the bar itself (0 = the corrupted
    run, 1 = the clean run), so the figure says what the numbers mean without the text around it."""
    vals = [v for v in (-1.0, -0.5, 0.0, 0.5, 1.0) if lo <= v <= -lo]
    names = {0.0: i18n.t("cause.fig_bar_corrupted", lang), 1.0: i18n.t("cause.fig_bar_clean", lang)}
    return dict(title=title, tickvals=vals, ticktext=[names.get(v, f"{v:g}".replace("-", "−")) for v in vals])


def fig_patch_grid(score: np.ndarray, raw: np.ndarray, tokens: Sequence[str], title: str, lang: str, *,
                   mark: tuple[int, int] | None = None, heads: bool = False, normalised: bool = True) -> go.Figure:
    """The layer × position (or layer × head) grid of patched runs: ``score`` [L, C] is the share of
    the clean answer restored (0 = corrupted, 1 = clean), or the raw logit difference when the two
    runs cannot be told apart (``normalised=False``); ``raw`` is always the logit difference (hover).
    A transparent marker on every cell lets a click pick it."""
    L, C = score.shape
    x = list(range(C))
    hover = _patch_hover(tokens, L, raw, lang, heads)
    if normalised:
        hi = max(1.0, float(np.nanmax(score)))
        lo = min(-hi, float(np.nanmin(score)))
        lo = -max(abs(lo), hi)  # symmetric around 0 so that 0 is white
        scale = dict(colorscale=PATCH_SCALE, zmin=lo, zmax=-lo, zmid=0.0)
        label = i18n.t("cause.fig_restored", lang)
        bar = _restored_bar(label, lo, lang)
    else:
        m = max(1e-9, float(np.nanmax(np.abs(score))))
        scale = dict(colorscale=PATCH_SCALE, zmin=-m, zmax=m, zmid=0.0)
        label = i18n.t("cause.hover_ld", lang)
        bar = dict(title=label)
    fig = go.Figure(go.Heatmap(z=score, x=x, y=list(range(L)), colorbar=bar, hoverinfo="skip", **scale))
    # one invisible marker per cell carries the hover text and takes the click (a heatmap cell cannot be selected)
    gx, gy = np.meshgrid(x, np.arange(L))
    # the share restored as the text under the figure writes it (78%), the raw logit difference to 3 decimals
    fmt = "{:.0%}" if normalised else "{:.3f}"
    text = [f"{h}<br>{label} = {fmt.format(v)}" for h, v in zip(hover.ravel(), np.asarray(score, dtype=np.float64).ravel())]
    fig.add_trace(go.Scatter(x=gx.ravel(), y=gy.ravel(), mode="markers", showlegend=False, text=text,
                             hovertemplate="%{text}<extra></extra>",
                             marker=dict(size=max(6, min(18, 600 // max(C, L))), symbol="square", color="rgba(0,0,0,0)")))
    if mark is not None:
        r, c = mark
        fig.add_shape(type="rect", x0=c - 0.5, x1=c + 0.5, y0=r - 0.5, y1=r + 0.5, line=dict(color="#16a34a", width=3))
    ticks = [f"h{c}" for c in x] if heads else [position_label(tokens, c) for c in x]
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=ticks, tickangle=-45 if not heads else 0,
                     title_text=i18n.t("cause.head", lang) if heads else i18n.t("cause.position", lang))
    fig.update_yaxes(autorange="reversed", title_text=i18n.t("cause.layer", lang), dtick=1 if L <= 12 else None)
    fig.update_layout(title=title, height=max(360, 16 * L + 160), margin=dict(t=50, b=40), clickmode="event+select",
                      dragmode=False)
    return fig


def fig_attribution(tokens: Sequence[str], gxi: np.ndarray, ig: np.ndarray, attention: np.ndarray, steps: int, layer: int,
                    lang: str) -> go.Figure:
    """Three rows over the prompt's positions: gradient × input, integrated gradients (logit units,
    red = toward the answer, blue = toward the foil) and the last position's attention (a share)."""
    x = list(range(len(tokens)))
    ticks = [position_label(tokens, i) for i in x]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.09,
                        subplot_titles=(i18n.t("cause.fig_gxi", lang), i18n.t("cause.fig_ig", lang, steps=steps),
                                        i18n.t("cause.fig_attn", lang, layer=layer)))
    for row, vals in ((1, gxi), (2, ig)):
        v = np.asarray(vals, dtype=np.float64)
        fig.add_trace(go.Bar(x=x, y=v, marker_color=[ANSWER_COLOUR if a > 0 else FOIL_COLOUR for a in v], showlegend=False,
                             customdata=ticks, hovertemplate="%{customdata}<br>%{y:.4f}<extra></extra>"), row=row, col=1)
    fig.add_trace(go.Bar(x=x, y=np.asarray(attention, dtype=np.float64), marker_color="#7c3aed", showlegend=False,
                         customdata=ticks, hovertemplate="%{customdata}<br>w = %{y:.3f}<extra></extra>"), row=3, col=1)
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=ticks, tickangle=-45, row=3, col=1)
    fig.update_yaxes(title_text=i18n.t("cause.fig_logit_units", lang), row=1, col=1)
    fig.update_yaxes(title_text=i18n.t("cause.fig_logit_units", lang), row=2, col=1)
    fig.update_yaxes(title_text="w", range=[0, 1], row=3, col=1)
    fig.update_layout(height=620, margin=dict(t=60, b=40))
    return fig


def fig_receipt_lens(curve: np.ndarray, top1: int | None, top5: int | None, token: str, lang: str) -> go.Figure:
    """The receipt's lens curve: the token's lens probability at every layer boundary (0 = the embeddings,
    L = the model's own prediction), the boundaries where it enters the top 5 and becomes the top-1 marked."""
    y = np.asarray(curve, dtype=np.float64)
    x = list(range(len(y)))
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines+markers", line=palette.line("main"), marker=palette.marker("main"),
                               name=escape.plot(token), hovertemplate="%{x}: p = %{y:.4f}<extra></extra>"))
    # the two labels one above the other: a top-1 a few boundaries after the top 5 wrote over it at the same height
    for at, key, dash, where in ((top5, "receipt.fig_top5", "dot", "bottom left"), (top1, "receipt.fig_top1", "dash", "top left")):
        if at is not None:
            fig.add_vline(x=at, line_dash=dash, line_color=palette.INK_SOFT, annotation_text=i18n.t(key, lang, l=at),
                          annotation_position=where)
    fig.update_layout(title=i18n.t("receipt.fig_title", lang, tok=escape.plot(token)), height=300, margin=dict(t=60, b=40),
                      xaxis_title=i18n.t("receipt.fig_x", lang), yaxis_title=i18n.t("receipt.fig_y", lang), yaxis_range=[0, 1],
                      showlegend=False)
    return fig
