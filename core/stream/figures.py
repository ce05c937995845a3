"""Figures for the residual-stream, logits and anatomy pages: pure functions → plotly Figures (or DOT).

No Streamlit here. Every label goes through ``core.i18n`` with the ``lang`` passed in. Positions
sit on the axes and token text in tick labels and hover, because plotly merges repeated
category labels ("苹果 … 苹果" would collapse into one column).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.common import escape
from core.common.i18n import t
from core.plot import attnview, palette
from core.plot.plotlabels import position_label, rank_labels
from core.stream.lens import MlpSteps, NormSteps

KEPT, REMOVED, ACCENT = palette.colour("main"), "#c7c7c7", palette.colour("accent")


def _pos_axis(fig: go.Figure, tokens: Sequence[str], max_ticks: int = 40, offset: int = 0, **kw: Any) -> None:
    """Positions as ticks with the token text, thinned out when the prompt is long."""
    T = len(tokens)
    step = max(1, int(np.ceil(T / max_ticks)))
    vals = list(range(0, T, step))
    fig.update_xaxes(tickmode="array", tickvals=[v + offset for v in vals], ticktext=[position_label(tokens, i, offset) for i in vals],
                     tickangle=-45, **kw)


# ---------------------------------------------------------------------------------------------
# residual stream


def fig_stream_norms(norms: np.ndarray, tokens: Sequence[str], lang: str, log: bool = True, start: int | None = None) -> go.Figure:
    """Heatmap of ‖resid[l, t]‖: layer boundary (rows) × position (columns). Up to ``attnview.CELLS``
    positions, one column each; beyond, the mean of blocks of positions (``start`` None, said on the
    figure) or a window of exact columns from ``start``."""
    view = attnview.strip(norms, start, how="mean")
    L1 = norms.shape[0]
    labels = escape.plot_all(attnview.cell_labels(view, tokens))
    z = np.log10(np.maximum(view.z, 1e-6)) if log else view.z
    hover = [[f"{t('residual.boundary', lang, l=l)}<br>{labels[i]}<br>‖x‖ = {view.z[l, i]:,.1f}" for i in range(view.n)]
             for l in range(L1)]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(view.n)), y=list(range(L1)), colorscale="Viridis", hoverinfo="text", text=hover,
        colorbar=dict(title="log₁₀ ‖x‖" if log else "‖x‖"),
    ))
    ticks = attnview.tick_index(view.n)
    fig.update_xaxes(tickmode="array", tickvals=ticks, ticktext=[labels[i] for i in ticks], tickangle=-45, title=t("ui.position", lang))
    fig.update_yaxes(title=t("residual.axis_layer", lang))
    title = attnview.titled(t("residual.fig_norms", lang), attnview.note(view, lang), width=110)
    fig.update_layout(title=title, height=480, margin=dict(t=attnview.title_top(title), b=10))
    return fig


def fig_sublayer_norms(attn: np.ndarray, mlp: np.ndarray, lang: str, title: str) -> go.Figure:
    """‖attn_out‖ and ‖mlp_out‖ per layer: what each half of a block writes into the stream."""
    layers = list(range(len(attn)))
    fig = go.Figure([
        go.Bar(x=layers, y=attn, name=t("residual.attn_out", lang), marker_color=palette.colour("main")),
        go.Bar(x=layers, y=mlp, name=t("residual.mlp_out", lang), marker_color=palette.colour("second"), marker_pattern_shape="/"),
    ])
    fig.update_layout(barmode="group", title=title, xaxis_title=t("ui.layer", lang), yaxis_title=t("residual.axis_norm", lang), height=380,
                      margin=dict(t=50, b=10), legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    return fig


def fig_norm_steps(s: NormSteps, lang: str) -> go.Figure:
    """Input vector, normalised vector and output (× gain), dimension by dimension."""
    dims = list(range(len(s.x)))
    rows = [
        (t("residual.norm_in", lang, rms=f"{s.rms_in:.4f}"), s.x, "#7f7f7f"),
        (t("residual.norm_hat", lang, rms=f"{s.rms_normed:.4f}"), s.normed, palette.colour("main")),
        (t("residual.norm_gain", lang), s.weight, palette.colour("third")),
        (t("residual.norm_out", lang, rms=f"{s.rms_out:.4f}"), s.out, palette.colour("accent")),
    ]
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, subplot_titles=[r[0] for r in rows], vertical_spacing=0.06)
    for i, (name, y, colour) in enumerate(rows, start=1):
        fig.add_trace(go.Bar(x=dims, y=y, name=name, marker_color=colour, showlegend=False), row=i, col=1)
    fig.update_xaxes(title=t("residual.axis_dim", lang), row=4, col=1)
    fig.update_layout(height=620, margin=dict(t=40, b=10), bargap=0)
    return fig


def fig_mlp_neurons(s: MlpSteps, lang: str, n: int = 20) -> go.Figure:
    """gate_proj(h), SiLU(gate), up_proj(h) and their product for the n most active neurons."""
    idx = s.top_neurons(n)
    x = [f"#{i}" for i in idx]
    fig = go.Figure([
        go.Bar(x=x, y=s.gate[idx], name="gate_proj(h)", marker_color=palette.colour("kv")),
        go.Bar(x=x, y=s.act[idx], name="SiLU(gate)", marker_color="#8c564b"),
        go.Bar(x=x, y=s.up[idx], name="up_proj(h)", marker_color="#17becf"),
        go.Bar(x=x, y=s.prod[idx], name="SiLU(gate) · up", marker_color=ACCENT),
    ])
    fig.update_layout(barmode="group", title=t("residual.fig_mlp", lang, n=n), xaxis_title=t("residual.axis_neuron", lang),
                      xaxis_type="category",
                      height=420, margin=dict(t=80, b=10), legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    return fig


def block_dot(facts: dict[str, Any], T: int, lang: str) -> str:
    """Graphviz DOT of one pre-norm block with live shapes: two norms, two residual adds."""
    d, H, Hkv, dh, ff = facts["d_model"], facts["n_heads"], facts["n_kv_heads"], facts["head_dim"], facts["d_ff"]
    norm, act = facts.get("norm_type", "RMSNorm"), facts.get("ffn_type", "SwiGLU")
    mlp = (f"gate_proj, up_proj\\n[{T}, {ff}] ×2\\nSiLU(gate) · up\\ndown_proj → [{T}, {d}]" if act == "SwiGLU"
           else f"fc [{T}, {ff}] → act\\nproj → [{T}, {d}]")
    nodes = {
        "x": (t("residual.dot_in", lang) + f"\\n[{T}, {d}]", "box", "#eeeeee"),
        "n1": (f"input_layernorm\\n{norm} [{T}, {d}]", "box", "#e8f0fe"),
        "qkv": (f"q_proj → [{H}, {T}, {dh}]\\nk_proj, v_proj → [{Hkv}, {T}, {dh}]\\n(RoPE on q, k)", "box", "#e8f0fe"),
        "att": (f"softmax(q·kᵀ/√{dh} + mask)\\n[{H}, {T}, {T}] · v → [{H}, {T}, {dh}]", "box", "#e8f0fe"),
        "o": (f"concat [{T}, {H * dh}]\\no_proj → [{T}, {d}]", "box", "#e8f0fe"),
        "add1": ("⊕", "circle", "#fff3cd"),
        "n2": (f"post_attention_layernorm\\n{norm} [{T}, {d}]", "box", "#fdebd0"),
        "mlp": (mlp, "box", "#fdebd0"),
        "add2": ("⊕", "circle", "#fff3cd"),
        "y": (t("residual.dot_out", lang) + f"\\n[{T}, {d}]", "box", "#eeeeee"),
    }
    lines = ["digraph block {", "rankdir=TB; nodesep=0.3; ranksep=0.2; size=\"7,9\";", 'node [fontname="Helvetica", fontsize=11, style=filled];']
    for k, (label, shape, colour) in nodes.items():
        lines.append(f'{k} [label="{label}", shape={shape}, fillcolor="{colour}"];')
    for a, b in (("x", "n1"), ("n1", "qkv"), ("qkv", "att"), ("att", "o"), ("o", "add1"), ("add1", "n2"), ("n2", "mlp"), ("mlp", "add2"), ("add2", "y")):
        lines.append(f"{a} -> {b};")
    skip = t("residual.dot_skip", lang)
    lines.append(f'x -> add1 [style=dashed, color="#b8860b", label="{skip}", fontsize=10];')
    lines.append(f'add1 -> add2 [style=dashed, color="#b8860b", label="{skip}", fontsize=10];')
    lines.append("}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# logits and sampling


def fig_candidates(steps: dict[str, np.ndarray], texts: Sequence[str], ids: Sequence[int], lang: str) -> go.Figure:
    """The top candidates: probability before filtering (outline) and after (filled, kept/removed)."""
    ids = list(ids)
    x = rank_labels(texts)  # "#1 ␣Paris": rank-prefixed (equal texts stay distinct), never read as a position
    keep = steps["keep"][ids]
    fig = go.Figure([
        go.Bar(x=x, y=steps["probs_before"][ids], name=t("logits.p_before", lang), marker_color="rgba(0,0,0,0)",
               marker_line=dict(color="#555", width=1.2)),
        go.Bar(x=x, y=steps["probs"][ids], name=t("logits.p_after", lang), marker_color=[KEPT if k else REMOVED for k in keep],
               customdata=np.stack([ids, keep], axis=1), hovertemplate="id %{customdata[0]}<br>p = %{y:.4f}<extra></extra>"),
    ])
    fig.update_layout(barmode="overlay", title=t("logits.fig_candidates", lang, kept=f"{int(steps['keep'].sum()):,}"), height=420,
                      yaxis_title=t("logits.prob", lang), xaxis_tickangle=-45, margin=dict(t=50, b=10),
                      legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    return fig


def fig_logit_lens(ids: np.ndarray, probs: np.ndarray, texts: Sequence[str], tokens: Sequence[str], lang: str,
                   show_text: bool = True, offset: int = 0) -> go.Figure:
    """Logit lens: the top next token read from every layer boundary (rows) at every position.

    ``ids``/``probs`` [L+1, T'] may be a window of positions starting at ``offset``.
    """
    L1, T = ids.shape
    cell = np.asarray([escape.plot(s) for s in texts], dtype=object).reshape(L1, T)
    hover = [[f"{t('residual.boundary', lang, l=l)}<br>{position_label(tokens, i, offset)} → «{cell[l, i]}»<br>p = {probs[l, i]:.3f}"
              for i in range(T)] for l in range(L1)]
    fig = go.Figure(go.Heatmap(
        z=probs, x=list(range(offset, offset + T)), y=list(range(L1)), zmin=0, zmax=1, colorscale=palette.SEQUENTIAL, hoverinfo="text", hovertext=hover,
        text=cell if show_text else None, colorbar=dict(title="p"),
    ))
    if show_text:  # each token in the ink that reads on its cell (4.6:1 at least; plotly's own pick fell to 3.9:1), ≥ 12 px
        fig.add_trace(go.Scatter(**palette.text_layer(probs, cell, list(range(offset, offset + T)), list(range(L1)), 0.0, 1.0, size=12)))
    _pos_axis(fig, tokens, offset=offset, title=t("ui.position", lang))
    fig.update_yaxes(title=t("residual.axis_layer", lang))
    fig.update_layout(title=t("logits.fig_lens", lang), height=max(420, 22 * L1 + 120), margin=dict(t=50, b=10))
    return fig


def lens_output_row(fig: go.Figure) -> str:
    """Where ``fig_logit_lens`` draws the last layer boundary — the model's own prediction: "top" or
    "bottom", read off the figure itself (its y values and whether the y axis is reversed)."""
    y = np.asarray(fig.data[0].y)
    last_is_max = int(np.argmax(y)) == len(y) - 1
    reversed_axis = fig.layout.yaxis.autorange == "reversed"
    return "top" if last_is_max != reversed_axis else "bottom"


def lens_caption(fig: go.Figure, lang: str) -> str:
    """The logit lens's caption, built from the figure's orientation so the two cannot disagree."""
    return t(f"logits.lens_note_{lens_output_row(fig)}", lang)


# ---------------------------------------------------------------------------------------------
# anatomy


def share(part: float, total: float) -> str:
    """A part's share to one decimal; a part that is not zero but rounds to it says "<0.1%", never "0.0%"."""
    f = part / total if total else 0.0
    return "<0.1%" if 0 < f < 0.0005 else f"{f:.1%}"


def fig_params(parts: dict[str, int], lang: str) -> go.Figure:
    """Parameters per role as horizontal bars, with the share of the total."""
    total = sum(parts.values())
    names = [t(f"anatomy.role_{r}", lang) for r in parts]
    vals = list(parts.values())
    fig = go.Figure(go.Bar(y=names, x=vals, orientation="h", marker_color=palette.colour("main"),
                           text=[f"{v:,} ({share(v, total)})" for v in vals], textposition="auto"))
    fig.update_layout(title=t("anatomy.fig_params", lang, total=f"{total:,}"), xaxis_title=t("anatomy.n_params", lang),
                      yaxis=dict(autorange="reversed"), height=120 + 32 * len(parts), margin=dict(t=50, b=10))
    return fig
