"""Figures and tables for the toy page: pure functions (numbers in → plotly Figure / DataFrame out).

No Streamlit here. Every label goes through ``core.i18n`` with the ``lang`` passed in. Axes carry
positions (0, 1, 2 …) with the token text in tick labels, because plotly merges repeated category
labels and a byte-level prompt repeats tokens all the time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.common.i18n import t
from core.engine.trace import Trace
from core.plot import attnview, palette
from core.plot.plotlabels import position_label

TOY_TICKS = 16  # tick labels on a toy heatmap's axis at most (every cell's tokens are in the hover)

# The sites of one attention layer and of one MLP (rows of core.engine.trace.SITES), in the order they are computed.
ATTN_STAGES = ("scores_raw", "scores_scaled", "mask", "scores_masked", "attn_pattern", "head_out", "concat", "o_proj")
MLP_STAGES = ("gate", "up", "act", "mlp_out")
SQUARE = {"scores_raw", "scores_scaled", "mask", "scores_masked", "attn_pattern"}
PER_HEAD = SQUARE | {"head_out"}


def _g3(x: float) -> str:
    return f"{x:.3g}"


def stage_array(tr: Trace, stage: str, layer: int, head: int) -> np.ndarray:
    """The traced values of one site, as a 2-D float32 array (rows = query positions)."""
    arr = tr.site(stage, layer)  # the mask: [T, T], the same in every layer and head
    arr = arr[head] if stage in PER_HEAD and stage != "mask" else arr  # [T, T] / [T, dh] / [T, H·dh] / [T, d] / [T, d_ff]
    return arr.astype(np.float32, copy=False)


def mlp_stages(tr: Trace) -> list[str]:
    """The MLP sites this trace holds (the down projection's output always: ``mlp_out``)."""
    return [s for s in MLP_STAGES if s in tr.kept_sites or s == "mlp_out"]


def site_caption(tr: Trace, stage: str, layer: int, head: int, lang: str) -> str:
    """One site's shape and the range of its finite values (−∞ of the mask left out)."""
    arr = stage_array(tr, stage, layer, head)
    fin = arr[np.isfinite(arr)]
    return t("toy.shape", lang, shape=list(arr.shape), lo=_g3(fin.min()), hi=_g3(fin.max()))


def row_check_caption(tr: Trace, layer: int, head: int, lang: str) -> str:
    """Two checks on one head's pattern: each row sums to 1, and nothing above the diagonal."""
    w = tr.attn_pattern[layer, head].astype(np.float64)
    return t("toy.check_rows", lang, err=_g3(np.abs(w.sum(-1) - 1).max()), above=_g3(np.triu(w, 1).max()))


def fig_site(tr: Trace, stage: str, layer: int, head: int, lang: str, start: int = 0) -> go.Figure:
    """One site as a heatmap: a [T, T] score matrix (query × key) or a [T, n] activation matrix. Beyond
    ``attnview.CELLS`` positions, the exact values of positions start … start + 63 (masked scores are
    −∞: they cannot be averaged into an overview), said on the figure."""
    full = stage_array(tr, stage, layer, head)
    n_all = full.shape[0]
    a = max(0, min(int(start), n_all - attnview.CELLS)) if n_all > attnview.CELLS else 0
    b = min(n_all, a + attnview.CELLS)
    arr = full[a:b, a:b] if stage in SQUARE else full[a:b]
    T = arr.shape[0]
    labels = [position_label(tr.tokens, i) for i in range(a, b)]
    finite = np.where(np.isfinite(arr), arr, np.nan)  # −∞ cannot be coloured; the hover says so
    text = np.where(np.isneginf(arr), "−∞", np.char.mod("%.3f", np.nan_to_num(arr, neginf=0.0)))
    square = stage in SQUARE
    cols = labels if square else [str(j) for j in range(arr.shape[1])]
    # every cell's row (and, square, column) token in the hover; a tick label on every k-th position only
    rows = np.array(labels, dtype=object)[:, None]
    custom = np.stack(np.broadcast_arrays(rows, np.array(cols if square else [""] * arr.shape[1], dtype=object)[None, :]), axis=-1)
    hover = ("q %{customdata[0]}<br>k %{customdata[1]}<br>%{text}<extra></extra>" if square
             else "%{customdata[0]}<br>dim %{x}<br>%{text}<extra></extra>")
    ticks = attnview.tick_index(T, TOY_TICKS)
    lo, hi = np.nanmin(finite) if np.isfinite(finite).any() else 0.0, np.nanmax(finite) if np.isfinite(finite).any() else 1.0
    signed = lo < 0 < hi
    fig = go.Figure(go.Heatmap(
        z=finite, x=list(range(arr.shape[1])), y=list(range(T)), text=text, hovertemplate=hover,
        colorscale=palette.DIVERGING if signed else palette.SEQUENTIAL, zmid=0 if signed else None,
        customdata=custom,
    ))
    fig.update_yaxes(autorange="reversed", tickvals=ticks, ticktext=[labels[i] for i in ticks],
                     title=t("toy.axis_query" if square else "toy.axis_position", lang))
    if square:
        fig.update_xaxes(tickvals=ticks, ticktext=[cols[i] for i in ticks], title=t("toy.axis_key", lang))
    else:
        fig.update_xaxes(title=t("toy.axis_dim", lang))
    title = t(f"toy.stage.{stage}", lang) + f" · {t('ui.layer', lang)} {layer}" + (f" · {t('ui.head', lang)} {head}" if stage in PER_HEAD and stage != "mask" else "")
    if n_all > attnview.CELLS:
        title = attnview.titled(title, t("attnview.strip_window", lang, a=a, b=b - 1, T=n_all), width=60)
    fig.update_layout(title=title, height=max(320, min(720, 26 * T + 140)), margin=dict(l=10, r=10, t=attnview.title_top(title), b=10))
    return fig


def facts_table(toy: dict[str, Any], real: dict[str, Any] | None, lang: str) -> pd.DataFrame:
    """The toy's config beside SmolLM2's: the same rows, smaller numbers."""
    rows = ("n_layers", "n_heads", "n_kv_heads", "attention_kind", "head_dim", "d_model", "d_ff", "vocab_size",
            "position_type", "rope_theta", "norm_type", "norm_placement", "ffn_type", "tied_embeddings", "max_positions", "n_params")

    def fmt(v: Any) -> str:
        if isinstance(v, bool):  # yes / no in the page's language, never "True" on the Chinese page
            return t("toy.yes" if v else "toy.no", lang)
        return f"{v:,}" if isinstance(v, int) else str(v)

    data = {t("toy.col_field", lang): [t(f"toy.fact.{r}", lang) for r in rows], t("toy.col_toy", lang): [fmt(toy.get(r)) for r in rows]}
    if real is not None:
        data[t("toy.col_real", lang, name=str(real.get("name", "")))] = [fmt(real.get(r)) for r in rows]
    return pd.DataFrame(data)


def fig_loss(losses: Sequence[float], lang: str, reference: Sequence[float] | None = None) -> go.Figure:
    """Training loss per step (and the shipped model's curve, dotted, for comparison)."""
    fig = go.Figure()
    if reference is not None:
        fig.add_scatter(y=list(reference), mode="lines", name=t("toy.loss_shipped", lang), line=dict(dash="dot", color="#999"))
    fig.add_scatter(y=list(losses), mode="lines", name=t("toy.loss_live", lang))
    fig.update_layout(title=t("toy.loss_title", lang), xaxis_title=t("toy.axis_step", lang), yaxis_title=t("toy.axis_loss", lang),
                      height=340, margin=dict(l=10, r=10, t=80, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1))  # above the plot, clear of the axis title
    return fig


def fig_live_loss(losses: Sequence[float], shipped: Sequence[float], lang: str) -> go.Figure:
    """A live run's loss beside the shipped model's curve over the same steps."""
    return fig_loss(losses, lang, shipped[: max(len(losses), 1)])


def train_caption(curve: dict[str, Any], limit_seconds: float, lang: str) -> str:
    """How the shipped toy was trained (steps, seconds), and how long a live run may take."""
    return t("toy.train_caption", lang, steps=len(curve["loss"]), seconds=curve["seconds"], limit=int(limit_seconds))


def live_note(result: dict[str, Any], shipped: dict[str, Any], lang: str) -> tuple[str, str]:
    """(level, text) for a finished live run. A run that did all its steps is a success (steps, seconds,
    time per step, the loss on the first vs the second copy); one the time budget cut short is a
    warning that says so — steps done of requested, why, and this machine's time per step against the
    shipped run's — never a green box."""
    rep = result["report"]
    done, asked = result.get("steps_done", len(result["losses"])), result["steps_requested"]
    tm = result.get("step_timing")
    per_step = f"{tm['median'] * 1000:.0f}" if tm else "—"
    losses = t("toy.live_losses", lang, first=_g3(rep["loss_first_copy"]), second=_g3(rep["loss_second_copy"]))
    if result.get("completed", done >= asked):
        return "success", t("toy.live_done", lang, n=done, seconds=f"{result['seconds']:.1f}", ms=per_step) + " " + losses
    ship_ms = f"{shipped['seconds'] / max(1, len(shipped['loss'])) * 1000:.0f}"
    return "warning", t("toy.live_cut", lang, n=done, steps=asked, limit=f"{result.get('budget_seconds', 0):.0f}", ms=per_step,
                        ship_ms=ship_ms) + " " + losses


def fig_pattern(weights: np.ndarray, tokens: Sequence[Any], title: str) -> go.Figure:
    """A small [T, T] attention pattern (used while training, on the repeated test sequence)."""
    T = weights.shape[0]
    labels = [position_label(tokens, i) for i in range(T)]
    lab = np.array(labels, dtype=object)
    custom = np.stack(np.broadcast_arrays(lab[:, None], lab[None, :]), axis=-1)  # (query, key) tokens per cell
    ticks = attnview.tick_index(T, TOY_TICKS)
    fig = go.Figure(go.Heatmap(z=attnview.hide_future(weights), x=list(range(T)), y=list(range(T)), colorscale=palette.SEQUENTIAL, zmin=0, zmax=1,
                               customdata=custom, hovertemplate="q %{customdata[0]}<br>k %{customdata[1]}<br>%{z:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickvals=ticks, ticktext=[labels[i] for i in ticks])
    fig.update_xaxes(tickvals=ticks, ticktext=[labels[i] for i in ticks])
    title = "<br>".join(attnview.wrap(title, 44))  # a half-width figure: a one-line title was cut at the right edge
    fig.update_layout(title=title, height=380 + 24 * title.count("<br>"), margin=dict(l=10, r=10, t=attnview.title_top(title, base=26), b=10))
    return fig


def _position_name(position: str, lang: str) -> str:
    """The shown name of a word-order setting's position encoding (the rows keep the internal key)."""
    return t(f"toy.wo_pos.{position}", lang)


def word_order_table(rows: list[dict[str, Any]], lang: str) -> pd.DataFrame:
    return pd.DataFrame({
        t("toy.wo_position", lang): [_position_name(r["position"], lang) for r in rows],
        t("toy.wo_causal", lang): [t("toy.yes" if r["causal"] else "toy.no", lang) for r in rows],
        t("toy.wo_pooled", lang): [f"{r['pooled_diff']:.2e}" for r in rows],
        t("toy.wo_permuted", lang): [f"{r['permuted_diff']:.2e}" for r in rows],
        t("toy.wo_verdict", lang): [t("toy.wo_differ" if r["distinguishable"] else "toy.wo_same", lang) for r in rows],
    })


def fig_word_order(rows: list[dict[str, Any]], lang: str) -> go.Figure:
    """Pooled-output difference per setting, log scale (the 'none + bidirectional' bar is ~1e-7: rounding)."""
    names = [f"{_position_name(r['position'], lang)} · {t('toy.wo_causal_short' if r['causal'] else 'toy.wo_bidir_short', lang)}" for r in rows]
    vals = [max(r["pooled_diff"], 1e-9) for r in rows]
    colors = [palette.colour("accent") if not r["distinguishable"] else palette.colour("main") for r in rows]
    fig = go.Figure(go.Bar(x=names, y=vals, marker_color=colors, text=[f"{v:.1e}" for v in vals], textposition="outside"))
    # powers of ten on the log axis (1e-6 read as '1μ' beside '0.01' means nothing to a class)
    fig.update_yaxes(type="log", title=t("toy.wo_pooled", lang), exponentformat="power", showexponent="all", dtick=2)
    fig.update_layout(title=t("toy.wo_fig_title", lang), height=360, margin=dict(l=10, r=10, t=50, b=10))
    return fig


def report_text(r: dict[str, Any], lang: str) -> str:
    """One sentence on what the shipped toy learned (numbers from ``train_toy.induction_report``)."""
    p, i = r["prev_token_head"], r["induction_head"]
    return t("toy.shipped_report", lang, first=_g3(r["loss_first_copy"]), second=_g3(r["loss_second_copy"]),
             pl=p["layer"], ph=p["head"], ps=f"{p['score']:.2f}", il=i["layer"], ih=i["head"], is_=f"{i['score']:.2f}")
