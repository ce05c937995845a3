"""Plotly figures for the generation, KV-cache and chat pages: pure functions, no Streamlit.

Every function takes already-translated strings (or ``lang``) so titles and axes follow the
page's language. Positions go on the axes and token text into tick labels / hover, because
plotly merges repeated category labels.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.engine.i18n import t
from core.engine.tokens import position_label

PALETTE = {"prefill": "#1f77b4", "decode": "#ff7f0e", "with": "#2ca02c", "without": "#d62728", "kv": "#9467bd", "weights": "#8c8c8c"}


def _layout(fig: go.Figure, title: str, height: int = 340) -> go.Figure:
    fig.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=60, b=10), template="plotly_white")
    return fig


def candidates(tokens: Sequence[str], probs: np.ndarray, sample_probs: np.ndarray, chosen: int, lang: str) -> go.Figure:
    """The top candidates of one step: the model's probability and the probability after the
    sampling settings; the chosen token is outlined."""
    labels = [position_label(tokens, i) for i, tk in enumerate(tokens)]
    line = [3 if i == chosen else 0 for i in range(len(tokens))]
    fig = go.Figure([
        go.Bar(y=labels, x=probs, orientation="h", name=t("generation.p_model", lang), marker_line_width=line,
               marker_line_color="black", hovertemplate="%{y}: %{x:.4f}<extra></extra>"),
        go.Bar(y=labels, x=sample_probs, orientation="h", name=t("generation.p_sample", lang), opacity=0.6,
               hovertemplate="%{y}: %{x:.4f}<extra></extra>"),
    ])
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title=t("generation.prob", lang), range=[0, 1])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.2))
    return _layout(fig, t("generation.fig_candidates", lang))


def attention_row(row: np.ndarray, tokens: Sequence[str], n_prompt: int, title: str, lang: str) -> go.Figure:
    """One query's attention over every cached position ([T_total]); prompt vs generated coloured."""
    x = np.arange(len(row))
    colors = [PALETTE["prefill"] if i < n_prompt else PALETTE["decode"] for i in x]
    fig = go.Figure(go.Bar(x=x, y=row.astype(np.float32), marker_color=colors, customdata=[position_label(tokens, i) for i in x],
                           hovertemplate="%{customdata}: %{y:.4f}<extra></extra>"))
    fig.update_xaxes(title=t("generation.cached_position", lang), tickmode="array", tickvals=x,
                     ticktext=[position_label(tokens, i) for i in x] if len(x) <= 60 else None, tickangle=-60)
    fig.update_yaxes(title=t("generation.weight", lang), range=[0, 1])
    return _layout(fig, title)


def prefill_matrix(mat: np.ndarray, tokens: Sequence[str], title: str, lang: str) -> go.Figure:
    """The prefill's full [T, T] attention matrix of one layer/head (zero above the diagonal)."""
    T = mat.shape[0]
    labels = [position_label(tokens, i) for i in range(T)]
    z = mat.astype(np.float32)
    fig = go.Figure(go.Heatmap(z=z, x=list(range(T)), y=list(range(T)), colorscale="Blues", zmin=0, zmax=1,
                               customdata=np.array([[f"{labels[r]} → {labels[c]}" for c in range(T)] for r in range(T)]),
                               hovertemplate="%{customdata}: %{z:.4f}<extra></extra>"))
    ticks = dict(tickmode="array", tickvals=list(range(T)), ticktext=labels) if T <= 40 else {}
    fig.update_xaxes(title=t("generation.key_pos", lang), **ticks)
    fig.update_yaxes(title=t("generation.query_pos", lang), autorange="reversed", **ticks)
    return _layout(fig, title, height=420)


def kv_growth(kv_tokens: np.ndarray, kv_bytes: np.ndarray, lang: str) -> go.Figure:
    """Cache size after each pass: bytes (bars) and positions (line, right axis). Pass 0 = prefill."""
    steps = np.arange(len(kv_tokens))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=steps, y=kv_bytes / 1024, name=t("generation.kv_kib", lang), marker_color=PALETTE["kv"]), secondary_y=False)
    fig.add_trace(go.Scatter(x=steps, y=kv_tokens, name=t("generation.kv_positions", lang), mode="lines+markers",
                             line_color=PALETTE["decode"]), secondary_y=True)
    fig.update_xaxes(title=t("generation.pass", lang))
    fig.update_yaxes(title=t("generation.kv_kib", lang), secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title=t("generation.kv_positions", lang), secondary_y=True, rangemode="tozero", showgrid=False)
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return _layout(fig, t("generation.fig_kv", lang))


def kv_layers(bytes_per_layer: np.ndarray, lang: str) -> go.Figure:
    """Bytes held by each layer's K and V right now."""
    fig = go.Figure(go.Bar(x=np.arange(len(bytes_per_layer)), y=bytes_per_layer / 1024, marker_color=PALETTE["kv"],
                           hovertemplate="%{x}: %{y:.1f} KiB<extra></extra>"))
    fig.update_xaxes(title=t("ui.layer", lang))
    fig.update_yaxes(title=t("generation.kv_kib", lang))
    return _layout(fig, t("generation.fig_kv_layers", lang), height=300)


def timings(seconds: Sequence[float], lang: str) -> go.Figure:
    """Measured wall time per pass: the prefill (TTFT) then each decode step (TPOT)."""
    s = np.asarray(seconds, dtype=float) * 1000
    colors = [PALETTE["prefill"]] + [PALETTE["decode"]] * (len(s) - 1)
    names = ["TTFT (prefill)"] + [f"TPOT {i}" for i in range(1, len(s))]
    fig = go.Figure(go.Bar(x=np.arange(len(s)), y=s, marker_color=colors, customdata=names,
                           hovertemplate="%{customdata}: %{y:.1f} ms<extra></extra>"))
    if len(s) > 1:
        fig.add_hline(y=float(np.median(s[1:])), line_dash="dot", annotation_text=t("generation.median_tpot", lang))
    fig.update_xaxes(title=t("generation.pass", lang))
    fig.update_yaxes(title="ms")
    return _layout(fig, t("generation.fig_time", lang), height=300)


def cache_compare(len_with: Sequence[int], s_with: Sequence[float], len_without: Sequence[int], s_without: Sequence[float],
                  lang: str) -> go.Figure:
    """Time of each new token against the sequence length, with and without the KV cache."""
    fig = go.Figure([
        go.Scatter(x=list(len_with), y=np.asarray(s_with) * 1000, mode="lines+markers", name=t("kv_cache.with", lang),
                   line_color=PALETTE["with"]),
        go.Scatter(x=list(len_without), y=np.asarray(s_without) * 1000, mode="lines+markers", name=t("kv_cache.without", lang),
                   line_color=PALETTE["without"]),
    ])
    fig.update_xaxes(title=t("kv_cache.seq_len", lang))
    fig.update_yaxes(title=t("kv_cache.ms_per_token", lang), rangemode="tozero")
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return _layout(fig, t("kv_cache.fig_compare", lang))


def kv_variants(names: Sequence[str], n_bytes: Sequence[float], lang: str) -> go.Figure:
    """KV-cache size of the same model as MHA / GQA / MQA."""
    fig = go.Figure(go.Bar(x=list(names), y=np.asarray(n_bytes, dtype=float) / 2**30, marker_color=PALETTE["kv"],
                           text=[f"{b / 2**30:.3g} GiB" for b in n_bytes], textposition="outside"))
    fig.update_yaxes(title="GiB", rangemode="tozero")
    return _layout(fig, t("kv_cache.fig_variants", lang), height=320)


def workloads(names: Sequence[str], rows: Sequence[dict[str, Any]], lang: str) -> go.Figure:
    """Each request shape (a row of ``kvcalc.simulate``): time split (TTFT + decode, stacked) and
    memory split (weights + KV, GiB)."""
    ttft, decode = [r["ttft_s"] for r in rows], [r["decode_s"] for r in rows]
    kv_gib, weights_gib = [r["kv_bytes"] / 2**30 for r in rows], [r["weight_bytes"] / 2**30 for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(t("kv_cache.time_split", lang), t("kv_cache.mem_split", lang)))
    fig.add_trace(go.Bar(x=list(names), y=list(ttft), name="TTFT (prefill)", marker_color=PALETTE["prefill"]), 1, 1)
    fig.add_trace(go.Bar(x=list(names), y=list(decode), name=t("kv_cache.decode_total", lang), marker_color=PALETTE["decode"]), 1, 1)
    fig.add_trace(go.Bar(x=list(names), y=list(weights_gib), name=t("kv_cache.weights", lang), marker_color=PALETTE["weights"]), 1, 2)
    fig.add_trace(go.Bar(x=list(names), y=list(kv_gib), name="KV cache", marker_color=PALETTE["kv"]), 1, 2)
    fig.update_layout(barmode="stack", legend=dict(orientation="h", y=-0.25))
    fig.update_yaxes(title="s", row=1, col=1)
    fig.update_yaxes(title="GiB", row=1, col=2)
    return _layout(fig, t("kv_cache.fig_workloads", lang), height=400)


def segments_html(segments: Sequence[tuple[str, bool]]) -> str:
    """The templated text with its special tokens highlighted (line breaks kept)."""
    parts = []
    for s, sp in segments:
        e = html.escape(s)
        parts.append(f'<b style="background:#ffe0b2;color:#b23c00">{e}</b>' if sp else e)
    return ('<pre style="white-space:pre-wrap;font-size:0.9em;background:#fafafa;padding:8px;border-radius:6px">'
            + "".join(parts) + "</pre>")
