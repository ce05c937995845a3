"""Figures of the learning aids (the guided tour, the journey): pure functions, chart data → plotly Figure.

No Streamlit here. Text comes in through ``t`` (an i18n lookup for the page's language), so
titles and axis labels follow the language switch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import plotly.graph_objects as go

from core.engine import escape, palette
from core.engine.plotlabels import rank_labels

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
