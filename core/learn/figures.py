"""Figures of the learning aids (the guided tour, the journey): pure functions, chart data → plotly Figure.

No Streamlit here. Text comes in through ``t`` (an i18n lookup for the page's language), so
titles and axis labels follow the language switch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import plotly.graph_objects as go

from core.common import escape
from core.engine import tokens
from core.plot import palette
from core.plot.plotlabels import rank_labels

Translate = Callable[[str], str]


def resid_norms_figure(norms: list[float], layer: int, t: Translate) -> go.Figure:
    """‖residual stream‖ of one token after 0 … L blocks; the chosen block's output is highlighted."""
    x = list(range(len(norms)))
    colours = [palette.colour("accent") if i == layer + 1 else palette.colour("main") for i in x]
    fig = go.Figure(go.Scatter(x=x, y=norms, mode="lines+markers", marker={"color": colours, "size": 8},
                               hovertemplate="%{x}: %{y:.2f}<extra></extra>"))
    fig.update_layout(title=t("tour.chart.resid_title"), xaxis_title=t("tour.chart.resid_x"),
                      yaxis_title=t("tour.chart.resid_y"), height=320, margin={"l": 40, "r": 10, "t": 50, "b": 40})
    return fig


def top_probs_figure(pieces: list[str], probs: list[float], t: Translate) -> go.Figure:
    """Horizontal bars of the top next-token probabilities, the favourite on top. The y axis is
    the rank (so two candidates that print alike stay separate); the token text is the tick label."""
    ranks = list(range(len(pieces)))
    fig = go.Figure(go.Bar(x=probs, y=ranks, orientation="h", text=[f"{p:.1%}" for p in probs], textposition="auto",
                           hovertext=escape.plot_all(pieces), hovertemplate="%{hovertext}: %{x:.2%}<extra></extra>"))
    fig.update_yaxes(tickvals=ranks, ticktext=rank_labels(pieces), autorange="reversed")
    fig.update_layout(title=t("tour.chart.top_title"), xaxis_title=t("tour.chart.top_x"), yaxis_title=t("tour.chart.top_y"),
                      xaxis_tickformat=".0%", height=300, margin={"l": 40, "r": 10, "t": 50, "b": 40})
    return fig


def stage_figure(chart: dict[str, Any], t: Translate) -> go.Figure:
    """The figure for a tour stage's chart data (``StageView.chart``)."""
    if chart["kind"] == "resid_norms":
        return resid_norms_figure(chart["norms"], chart["layer"], t)
    if chart["kind"] == "top_probs":
        return top_probs_figure(chart["pieces"], chart["probs"], t)
    raise ValueError(f"unknown chart kind {chart['kind']!r}")


def norms_figure(norms: np.ndarray, title: str, xlab: str, ylab: str) -> go.Figure:
    fig = go.Figure(go.Scatter(x=list(range(len(norms))), y=norms, mode="lines+markers",
                               hovertemplate="resid[%{x}]: ‖x‖ = %{y:.3f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title=xlab, yaxis_title=ylab, height=300, margin=dict(l=10, r=10, t=40, b=10))
    return fig


# ---------------------------------------------------------------------------------------------
# training vs inference (core.learn.training)


def shift_label(pieces: list[str], t: int) -> str:
    """"3·␣capital → ␣of": position t, its token, and the label it is trained to predict (token t + 1),
    both by the one label rule (``core.engine.tokens.label``)."""
    return escape.plot(f"{tokens.position_label(pieces, t)} → {tokens.label(pieces, t + 1)}")


def loss_figure(losses: np.ndarray, p_label: np.ndarray, rank: np.ndarray, pieces: list[str], chosen: int,
                t: Translate) -> go.Figure:
    """One bar per position t: the cross-entropy of the real next token, −log p(token t + 1 | tokens ≤ t),
    from one forward pass; the mean (the training loss) as a line; the chosen position highlighted."""
    x = list(range(len(losses)))
    colours = [palette.colour("accent") if i == chosen else palette.colour("main") for i in x]
    ticks = [shift_label(pieces, i) for i in x]
    fig = go.Figure(go.Bar(x=x, y=[float(v) for v in losses], marker={"color": colours, "pattern": {"shape": ["/" if i == chosen else "" for i in x]}},  # not by colour alone
                           name=t("training.fig_loss_bar"),
                           customdata=np.stack([p_label, rank + 1], axis=1).tolist(), hovertext=ticks,
                           hovertemplate="%{hovertext}<br>" + t("training.fig_loss_hover") + "<extra></extra>"))
    mean = float(np.mean(losses))
    fig.add_trace(go.Scatter(x=[-0.5, len(losses) - 0.5], y=[mean, mean], mode="lines", line=palette.line("second", width=2),
                             name=t("training.fig_loss_mean").format(v=f"{mean:.3f}"), hoverinfo="skip"))
    step = max(1, len(x) // 32)  # at most ~32 tick labels; every bar keeps its label in the hover text
    fig.update_xaxes(tickvals=x[::step], ticktext=ticks[::step], tickangle=-60)
    fig.update_layout(title=t("training.fig_loss_title"), xaxis_title=t("training.fig_loss_x"), yaxis_title=t("training.fig_loss_y"),
                      height=440, margin={"l": 50, "r": 10, "t": 50, "b": 140}, showlegend=True,
                      legend={"orientation": "h", "y": 1.02, "x": 0, "yanchor": "bottom"})
    return fig


def same_logits_figure(z_parallel: np.ndarray, z_prefix: np.ndarray, pieces: list[str], t: Translate) -> go.Figure:
    """The best next-token candidates at one position, their logits from row t of the parallel pass beside
    those from a separate pass of the prefix alone: two routes, the same bars."""
    ranks = list(range(len(pieces)))
    fig = go.Figure()
    for role, shape, name, p in (("main", "", t("training.fig_same_parallel"), z_parallel),
                                 ("second", "/", t("training.fig_same_prefix"), z_prefix)):  # told apart by hatching too
        fig.add_trace(go.Bar(x=[float(v) for v in p], y=ranks, orientation="h", name=name,
                             marker={"color": palette.colour(role), "pattern": {"shape": shape}},
                             text=[f"{v:.3f}" for v in p], textposition="auto", hovertext=escape.plot_all(pieces),
                             hovertemplate="%{hovertext}: %{x:.6f}<extra>" + escape.plot(name) + "</extra>"))
    fig.update_yaxes(tickvals=ranks, ticktext=rank_labels(pieces), autorange="reversed")
    fig.update_layout(title=t("training.fig_same_title"), xaxis_title=t("training.fig_same_x"), barmode="group", height=380,
                      margin={"l": 40, "r": 10, "t": 50, "b": 40},
                      legend={"orientation": "h", "y": 1.02, "x": 0, "yanchor": "bottom"})
    return fig


def overview_figure(names: list[str], values: list[str], links: list[str], norms: np.ndarray, title: str, norms_label: str) -> go.Figure:
    """The whole model in one row of boxes (``names``, each with its live ``values`` and a link to its page,
    ``links``: relative URLs), arrows between them, and inside the blocks the last position's ‖residual‖ after
    each block (``norms``, L + 1 values) as a small line: the picture a student starts from."""
    n = len(names)
    fig = go.Figure()
    for i, (name, value, link) in enumerate(zip(names, values, links)):
        fig.add_shape(type="rect", x0=i + 0.06, x1=i + 0.94, y0=0.0, y1=1.0, line=dict(color=palette.INK_SOFT, width=1),
                      fillcolor=palette.BOX_WARM if i in (3, 4) else palette.BOX, layer="below")
        fig.add_annotation(x=i + 0.5, y=0.8, text=f'<a href="{escape.plot(link)}" target="_self"><b>{escape.plot(name)}</b></a>',
                           showarrow=False, font=dict(size=14, color=palette.INK))  # a link, in the text's ink
        fig.add_annotation(x=i + 0.5, y=0.58, text=escape.plot(value), showarrow=False, font=dict(size=13, color=palette.INK))
        if i:
            fig.add_annotation(x=i + 0.06, y=0.5, ax=i - 0.06, ay=0.5, xref="x", yref="y", axref="x", ayref="y", text="",
                               showarrow=True, arrowhead=2, arrowwidth=1.5, arrowcolor=palette.INK_SOFT)
    nr = np.asarray(norms, dtype=np.float64)
    if nr.size > 1:  # inside the two block boxes (attention, MLP): ‖h‖ after each block
        x = 3.12 + 1.76 * np.arange(nr.size) / (nr.size - 1)
        y = 0.1 + 0.3 * (nr - nr.min()) / ((nr.max() - nr.min()) or 1.0)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line=dict(color=palette.colour("accent"), width=2), name=norms_label,
                                 customdata=np.stack([np.arange(nr.size), nr], axis=-1),
                                 hovertemplate="%{customdata[0]:.0f}: %{customdata[1]:.1f}<extra></extra>", showlegend=False))
    fig.update_xaxes(visible=False, range=[0, n], fixedrange=True)
    fig.update_yaxes(visible=False, range=[-0.05, 1.05], fixedrange=True)
    fig.update_layout(title=title, height=200, margin=dict(l=4, r=4, t=40, b=4), plot_bgcolor="#ffffff", hovermode="closest")
    return fig
