"""Figures (and the token-chip HTML) for the "inside the real model" pages: tokens, context, heads,
ablation. Pure functions: numpy in, plotly Figure (or an HTML string) out; every label is
translated through ``core.i18n`` with the ``lang`` passed in. No Streamlit here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import get_colorscale
from plotly.subplots import make_subplots

from core.common import escape, i18n
from core.plot import attnview, palette
from core.plot.attnview import MapView
from core.plot.plotlabels import position_label, visible


def fig_id_distance(distance: np.ndarray, cosine: np.ndarray, example: tuple[int, int, float], lang: str) -> go.Figure:
    """|id_a − id_b| (log axis) vs the cosine similarity of the two embedding rows."""
    fig = go.Figure()
    fig.add_trace(go.Scattergl(x=np.maximum(distance, 1), y=cosine, mode="markers", name=i18n.t("tokens.pairs_random", lang),
                               marker=dict(size=4, opacity=0.45, color="#2563eb")))
    a, b, c = example
    fig.add_trace(go.Scatter(x=[max(abs(b - a), 1)], y=[c], mode="markers+text", text=[f"{a} vs {b}"], textposition="top center",
                             name=i18n.t("tokens.pair_example", lang), marker=dict(size=12, color="#dc2626", symbol="star")))
    fig.update_layout(title=i18n.t("tokens.fig_iddist_title", lang), xaxis_title=i18n.t("tokens.fig_iddist_x", lang),
                      yaxis_title=i18n.t("tokens.fig_iddist_y", lang), height=380, margin=dict(t=50, b=40))
    fig.update_xaxes(type="log", dtick=1)  # a label at each power of ten only: never the minor "2 5 2 5 …"
    return fig


def fig_pca(words: Sequence[str], coords: np.ndarray, explained: np.ndarray, lang: str) -> go.Figure:
    """Chosen words' embeddings projected on their first two principal axes."""
    fig = go.Figure(go.Scatter(x=coords[:, 0], y=coords[:, 1], mode="markers+text", text=[visible(w) for w in words],
                               textposition=label_sides(coords), marker=dict(size=9, color="#7c3aed"),
                               hovertemplate="%{text}<br>(%{x:.3f}, %{y:.3f})<extra></extra>"))
    fig.update_layout(title=i18n.t("tokens.fig_pca_title", lang), height=480, margin=dict(t=50, b=40),
                      xaxis_title=f"PC1 ({explained[0]:.0%})", yaxis_title=f"PC2 ({explained[1]:.0%})")
    return fig


def label_sides(coords: np.ndarray) -> list[str]:
    """Where to write each point's label so that close neighbours do not print over each other: on
    the side facing away from the nearest other point (above it, below it, left or right)."""
    xy = np.asarray(coords, dtype=np.float64)[:, :2]
    n = len(xy)
    if n < 2:
        return ["top center"] * n
    span = np.ptp(xy, axis=0)
    span[span == 0] = 1.0
    unit = xy / span  # both axes on one scale, as the eye sees them
    out = []
    for i in range(n):
        d = np.hypot(*(unit - unit[i]).T)
        d[i] = np.inf
        dx, dy = unit[i] - unit[int(np.argmin(d))]  # pointing away from the nearest neighbour
        if abs(dy) >= abs(dx):
            out.append("top center" if dy >= 0 else "bottom center")
        else:
            out.append("middle right" if dx >= 0 else "middle left")
    return out


def fig_context(sims: Sequence[np.ndarray], names: Sequence[str], baseline: np.ndarray, lang: str) -> go.Figure:
    """Cosine similarity of the followed tokens' residual streams in prompt A vs prompt B, per layer
    boundary: one line per token of the word (the last, which has read the whole word, drawn thickest)."""
    x = np.arange(len(sims[-1]))
    fig = go.Figure()
    n = len(sims)
    for k, (sim, name) in enumerate(zip(sims, names)):
        last = k == n - 1
        fig.add_trace(go.Scatter(x=x, y=sim, mode="lines+markers", name=escape.plot(name) if n > 1 else i18n.t("context.curve_same", lang),
                                 line=dict(width=3 if last else 1.5), marker=dict(size=6 if last else 4), opacity=1.0 if last else 0.8))
    fig.add_trace(go.Scatter(x=x, y=baseline, mode="lines", name=i18n.t("context.curve_base", lang), line=dict(dash="dot", color="#94a3b8")))
    fig.update_layout(title=i18n.t("context.fig_title", lang), xaxis_title=i18n.t("context.fig_x", lang),
                      yaxis_title=i18n.t("context.fig_y", lang), height=420, margin=dict(t=50, b=40),
                      legend=dict(orientation="h", y=-0.3, yanchor="top"))
    return fig


def _hover(tokens: Sequence[str], n: int, lang: str, view: MapView | None = None) -> list[list[str]]:
    """Hover text per drawn cell: the query and key tokens, or the position ranges an averaged cell covers."""
    q, k = i18n.t("heads.query", lang), i18n.t("heads.key", lang)
    if view is None or view.exact:
        s = 0 if view is None else view.start
        labels = [position_label(tokens, s + i) for i in range(n)]
    else:
        labels = [f"{a}–{b}" for a, b in (view.span(i) for i in range(n))]
    return [[f"{q} {labels[i]}<br>{k} {labels[j]}" for j in range(n)] for i in range(n)]


def map_note(view: MapView, lang: str, drawn: np.ndarray | None = None) -> str:
    """The one sentence under a map that says what its cells are: averaged blocks (and where their colour
    scale ends: ``drawn``, every panel drawn, defaults to ``view.z``) or a window of exact weights."""
    if not view.exact:
        scale = colour_note(view.z if drawn is None else drawn, view, lang)
        return f'{i18n.t("attnview.averaged", lang, b=view.block, T=view.n_tokens, n=view.n)} {scale}'.rstrip()
    if not view.whole:
        return i18n.t("attnview.window", lang, a=view.start, b=view.start + view.n - 1, T=view.n_tokens)
    return ""


def fig_head_grid(maps: np.ndarray, titles: Sequence[str], tokens: Sequence[str], lang: str, cols: int = 3,
                  view: MapView | None = None) -> go.Figure:
    """Small multiples: maps [N, n, n] (queries × keys), one heatmap per panel, positions on the axes
    (``view``: what the cells are — averaged blocks or a window — when not the whole exact map)."""
    n, T = maps.shape[0], maps.shape[1]
    rows = int(np.ceil(n / cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=escape.plot_all(titles), horizontal_spacing=0.04, vertical_spacing=0.08 if rows < 6 else 0.04)
    hover = _hover(tokens, T, lang, view)
    pos = view.positions() if view is not None else list(range(T))
    top, cbar = _colour_top(maps, view, lang)
    for k in range(n):
        fig.add_trace(go.Heatmap(z=attnview.hide_future(maps[k], view), x=pos, y=pos, coloraxis="coloraxis", customdata=hover,
                                 hovertemplate="%{customdata}<br>" + cbar + " = %{z:.3f}<extra></extra>"), row=k // cols + 1, col=k % cols + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(coloraxis=dict(colorscale=palette.SEQUENTIAL, cmin=0, cmax=top, colorbar=dict(title=cbar)), height=max(320, 240 * rows),
                      margin=dict(t=40, b=20, l=20, r=20))
    return fig


def _colour_top(z: np.ndarray, view: MapView | None, lang: str) -> tuple[float, str]:
    """The colour scale's top and the colour bar's title: 0…1 for exact weights; for an overview, whose
    cells average b × b weights (a row's weight of 1 spread over the block: every cell is small),
    the largest cell drawn, so the map is not a blank white square on a projector."""
    if view is None or view.exact:
        return 1.0, "w"
    return max(float(np.nanmax(z)), 1e-6), i18n.t("attnview.mean_w", lang)


def colour_note(z: np.ndarray, view: MapView | None, lang: str) -> str:
    """The sentence that says an overview's colours are stretched (empty for exact weights)."""
    if view is None or view.exact:
        return ""
    return i18n.t("heads.scale_stretched", lang, m=f"{_colour_top(z, view, lang)[0]:.3f}")


def fig_query_bars(weights: np.ndarray, tokens: Sequence[str], query: int, lang: str, start: int | None = None) -> go.Figure:
    """One query position's weights over the keys it may see (0 … query): a bar per key up to
    ``attnview.CELLS`` keys; beyond, the whole row in summed blocks (``start`` None) or a window of
    exact weights from ``start``. Every bar's token (or block and its strongest key) is in the hover."""
    rb = attnview.row_bars(weights[: query + 1], lambda p: position_label(tokens, p), start, lang=lang)
    fig = go.Figure(go.Bar(x=rb.x, y=rb.y, width=rb.width, customdata=rb.hover, marker_color=palette.colour("main"),
                           hovertemplate="%{customdata}<br>" + ("Σ w" if rb.view.summed else "w") + " = %{y:.4f}<extra></extra>"))
    title = attnview.titled(i18n.t("heads.fig_query_title", lang, q=position_label(tokens, query)), rb.note, width=110)
    fig.update_layout(title=title, xaxis_title=i18n.t("heads.key_pos", lang), yaxis_title=i18n.t("heads.weight", lang), height=360,
                      margin=dict(t=attnview.title_top(title), b=40))
    if rb.tickvals is not None:
        fig.update_xaxes(tickmode="array", tickvals=rb.tickvals, ticktext=rb.ticktext, tickangle=-45)
    return fig


def fig_atlas(values: np.ndarray, title: str, colorbar: str, lang: str, mark: tuple[int, int] | None = None) -> go.Figure:
    """A [L, H] map of one head metric: layers down, heads across."""
    L, H = values.shape
    fig = go.Figure(go.Heatmap(z=values, x=list(range(H)), y=list(range(L)), colorscale="Viridis", colorbar=dict(title=colorbar),
                               hovertemplate=f"{i18n.t('ui.layer', lang)} %{{y}} · {i18n.t('ui.head', lang)} %{{x}}<br>%{{z:.3f}}<extra></extra>"))
    if mark is not None:
        fig.add_trace(go.Scatter(x=[mark[1]], y=[mark[0]], mode="markers", showlegend=False, hoverinfo="skip",
                                 marker=dict(symbol="square-open", size=14, color=palette.colour("accent"), line=dict(width=3))))
    fig.update_layout(title=title, xaxis_title=i18n.t("ui.head", lang), yaxis_title=i18n.t("ui.layer", lang), height=max(300, 16 * L + 120),
                      margin=dict(t=50, b=40))
    fig.update_yaxes(autorange="reversed")
    return fig


def fig_single_map(weights: np.ndarray, tokens: Sequence[str], title: str, lang: str, view: MapView | None = None) -> go.Figure:
    """One head's attention map [n, n]: the whole map, or what ``view`` says it is."""
    T = weights.shape[0]
    pos = view.positions() if view is not None else list(range(T))
    top, cbar = _colour_top(weights, view, lang)
    fig = go.Figure(go.Heatmap(z=attnview.hide_future(weights, view), x=pos, y=pos, colorscale=palette.SEQUENTIAL, zmin=0, zmax=top, customdata=_hover(tokens, T, lang, view),
                               colorbar=dict(title=cbar), hovertemplate="%{customdata}<br>" + cbar + " = %{z:.3f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title=i18n.t("heads.key_pos", lang), yaxis_title=i18n.t("heads.query_pos", lang), height=420,
                      margin=dict(t=50, b=40))
    fig.update_yaxes(autorange="reversed")
    return fig


def fig_sweep(sharpness: np.ndarray, kl: np.ndarray, names: Sequence[str], chosen: int | None, lang: str) -> go.Figure:
    """Each head: how sharp its attention is (x) vs how much the next token changes without it (y)."""
    colors = [palette.colour("accent") if k == chosen else palette.colour("main") for k in range(len(names))]
    fig = go.Figure(go.Scatter(x=sharpness, y=kl, mode="markers+text" if len(names) <= 12 else "markers", text=escape.plot_all(names),
                               textposition="top center", marker=dict(size=10 if len(names) <= 12 else 7, color=colors), hovertemplate="%{text}<br>x = %{x:.3f}<br>KL = %{y:.4g}<extra></extra>"))
    fig.update_layout(title=i18n.t("ablation.fig_sweep_title", lang), xaxis_title=i18n.t("ablation.fig_sweep_x", lang),
                      yaxis_title=i18n.t("ablation.fig_sweep_y", lang), height=400, margin=dict(t=50, b=40))
    return fig


# ---------------------------------------------------------------------------------------------
# long context (core.inside.longctx)


# Streamlit's plotly theme sends its own colours to the browser as the placeholders #000001 … #000040 and the
# frontend swaps every string equal to one of them for a theme colour, in any figure. Magma's darkest stop is
# "#000004" (= its placeholder for the 4th categorical colour, a pale pink): the reader map's strongest weights
# were drawn pale. Pure black looks the same and is no placeholder.
_PLACEHOLDER = re.compile(r"#0000(0[1-9]|[1-3][0-9]|40)", re.IGNORECASE)


def unclaimed_colorscale(name: str) -> list[list[Any]]:
    """Plotly's named colorscale ``name`` with any Streamlit placeholder colour replaced by black."""
    return [[pos, "#000000" if _PLACEHOLDER.fullmatch(c) else c] for pos, c in get_colorscale(name)]


def fig_reader_map(z: np.ndarray, block: int, n_tokens: int, span: tuple[int, int] | None, lang: str) -> go.Figure:
    """[L, n] the last position's attention over the document, per layer (keys pooled by ``block``)."""
    x = [i * block for i in range(z.shape[1])]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=list(range(z.shape[0])), colorscale=unclaimed_colorscale("Magma"), reversescale=True, zmin=0,
                               colorbar=dict(title="w"),
                               hovertemplate=f"{i18n.t('ui.layer', lang)} %{{y}}<br>{i18n.t('longctx.keys_from', lang)} %{{x}}<br>w = %{{z:.4f}}<extra></extra>"))
    if span is not None:
        fig.add_vrect(x0=span[0] - 0.5, x1=span[1] + 0.5, line=dict(color="#22c55e", width=2), fillcolor="rgba(0,0,0,0)")
    fig.update_layout(title=i18n.t("longctx.fig_reader", lang, T=n_tokens), xaxis_title=i18n.t("heads.key_pos", lang),
                      yaxis_title=i18n.t("ui.layer", lang), height=max(320, 14 * z.shape[0] + 120), margin=dict(t=50, b=40))
    fig.update_yaxes(autorange="reversed")
    return fig


def fig_span_heads(mass: np.ndarray, uniform: float, lang: str) -> go.Figure:
    """[L, H] each head's attention share on the chosen span, from the last position."""
    L, H = mass.shape
    fig = go.Figure(go.Heatmap(z=mass, x=list(range(H)), y=list(range(L)), colorscale="Viridis", zmin=0, zmax=max(1e-9, float(mass.max())),
                               colorbar=dict(title=i18n.t("longctx.share", lang)),
                               hovertemplate=f"{i18n.t('ui.layer', lang)} %{{y}} · {i18n.t('ui.head', lang)} %{{x}}<br>%{{z:.3f}}<extra></extra>"))
    fig.update_layout(title=i18n.t("longctx.fig_span", lang, u=f"{uniform:.3f}"), xaxis_title=i18n.t("ui.head", lang), yaxis_title=i18n.t("ui.layer", lang),
                      height=max(300, 16 * L + 120), margin=dict(t=50, b=40))
    fig.update_yaxes(autorange="reversed")
    return fig


def fig_sink_curve(x: np.ndarray, y: np.ndarray, layer: int, lang: str) -> go.Figure:
    """Per head (thin) and the mean (thick): the weight on key 0 against the query position."""
    fig = go.Figure()
    for h in range(y.shape[0]):
        fig.add_trace(go.Scatter(x=x, y=y[h], mode="lines", line=dict(width=1), opacity=0.55, name=f"h{h}"))
    fig.add_trace(go.Scatter(x=x, y=y.mean(axis=0), mode="lines", line=dict(width=4, color="#111827"), name=i18n.t("longctx.mean", lang)))
    fig.update_layout(title=i18n.t("longctx.fig_sink", lang, l=layer), xaxis_title=i18n.t("heads.query_pos", lang),
                      yaxis_title=i18n.t("longctx.w_first", lang), yaxis_range=[0, 1], height=380, margin=dict(t=50, b=40))
    return fig


def _limit_line(fig: go.Figure, x: float, text: str, role: str, pos: str = "top right") -> None:
    fig.add_vline(x=x, line=palette.line(role, width=2), annotation_text=text, annotation_position=pos)


def fig_toy_past(first: Sequence[int], all_tokens: Sequence[float | None], copies: Sequence[float | None], trained: int,
                 max_positions: int, chance: float, lang: str) -> go.Figure:
    """The toy's measured loss per bin of positions (each bin at its first position), on every predicted
    token and on the predictable ones, with its trained length, its config's max_positions and chance marked."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=list(first), y=list(copies), mode="lines+markers", name=i18n.t("pasttrain.toy_copies", lang),
                             line=palette.line("main", width=3), marker=palette.marker("main", size=6)))
    fig.add_trace(go.Scatter(x=list(first), y=list(all_tokens), mode="lines+markers", name=i18n.t("pasttrain.toy_all", lang),
                             line=palette.line("second", width=2), marker=palette.marker("second", size=5)))
    fig.add_hline(y=chance, line=dict(color=palette.OKABE_ITO["grey"], dash="dot"),
                  annotation_text=i18n.t("pasttrain.chance_line", lang, c=f"{chance:.2f}"), annotation_position="bottom right")
    _limit_line(fig, trained, i18n.t("pasttrain.trained_line", lang, n=f"{trained:,}"), "accent")
    if max_positions and max_positions <= max(first):
        _limit_line(fig, max_positions, i18n.t("pasttrain.maxpos_line", lang, n=f"{max_positions:,}"), "weights")
    fig.update_layout(title=i18n.t("pasttrain.fig_toy", lang), xaxis_title=i18n.t("pasttrain.x_pos", lang),
                      yaxis_title=i18n.t("pasttrain.y_loss", lang), height=400, margin=dict(t=50, b=40),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def fig_real_past(rec: dict[str, Any], lang: str) -> go.Figure:
    """The shipped measurement (assets/past_training.json) exactly as written: the loss per bin of positions
    (at each bin's first position), the control where measured, the trained length and the trace cut marked."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=rec["first"], y=rec["loss"], mode="lines+markers", name=i18n.t("pasttrain.real_full", lang),
                             line=palette.line("main", width=3), marker=palette.marker("main", size=6)))
    if "control" in rec:
        xs = [a for a, c in zip(rec["first"], rec["control"], strict=True) if c is not None]
        ys = [c for c in rec["control"] if c is not None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=i18n.t("pasttrain.real_control", lang),
                                 line=palette.line("with", width=2), marker=palette.marker("with", size=6)))
    _limit_line(fig, rec["trained"], i18n.t("pasttrain.trained_line", lang, n=f"{rec['trained']:,}"), "accent")
    _limit_line(fig, rec["trace_cut"], i18n.t("pasttrain.cut_line", lang, n=f"{rec['trace_cut']:,}"), "weights", "top left")
    fig.update_layout(title=i18n.t("pasttrain.fig_real", lang, n=f"{rec['n_tokens']:,}"), xaxis_title=i18n.t("pasttrain.x_pos", lang),
                      yaxis_title=i18n.t("pasttrain.y_loss", lang), height=400, margin=dict(t=50, b=40),
                      legend=dict(orientation="h", y=-0.2))
    return fig
