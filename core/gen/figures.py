"""Plotly figures for the generation, KV-cache and chat pages: pure functions, no Streamlit.

Every function takes already-translated strings (or ``lang``) so titles and axes follow the
page's language. Positions go on the axes and token text into tick labels / hover, because
plotly merges repeated category labels.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.common import escape
from core.common.i18n import t
from core.plot import attnview, palette
from core.plot.plotlabels import position_label, rank_labels

PALETTE = {role: palette.colour(role) for role in ("prefill", "decode", "with", "without", "kv", "weights")}


def _layout(fig: go.Figure, title: str, height: int = 340) -> go.Figure:
    fig.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=60, b=10), template="plotly_white")
    return fig


def candidates(tokens: Sequence[str], probs: np.ndarray, sample_probs: np.ndarray, chosen: int, lang: str) -> go.Figure:
    """The top candidates of one step: the model's probability and the probability after the
    sampling settings; the chosen token is outlined."""
    labels = rank_labels(tokens)  # candidates stand alone: ranked, never read as neighbours
    line = [3 if i == chosen else 0 for i in range(len(tokens))]
    fig = go.Figure([
        go.Bar(y=labels, x=probs, orientation="h", name=t("generation.p_model", lang), marker_line_width=line,
               marker_line_color="black", hovertemplate="%{y}: %{x:.4f}<extra></extra>"),
        go.Bar(y=labels, x=sample_probs, orientation="h", name=t("generation.p_sample", lang), opacity=0.6,
               hovertemplate="%{y}: %{x:.4f}<extra></extra>"),
    ])
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title=t("generation.prob", lang), range=[0, 1])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.3, yanchor="top"))  # below the axis title, not on it
    return _layout(fig, t("generation.fig_candidates", lang))


def attention_row(row: np.ndarray, tokens: Sequence[str], n_prompt: int, title: str, lang: str,
                  start: int | None = None) -> go.Figure:
    """One query's attention over every cached position ([T_total]); prompt vs generated coloured. Past
    ``attnview.CELLS`` positions: the whole row in summed blocks (``start`` None) or a window of exact
    weights from ``start``; the title says which, every bar's token is in the hover."""
    rb = attnview.row_bars(row, lambda p: position_label(tokens, p), start, most=12, lang=lang)
    last = [rb.view.span(i)[1] for i in range(rb.view.n)]  # a block holding any generated key is coloured as generated
    colors = [PALETTE["prefill"] if p < n_prompt else PALETTE["decode"] for p in last]
    fig = go.Figure(go.Bar(x=rb.x, y=rb.y, width=rb.width, marker_color=colors, customdata=rb.hover,
                           hovertemplate="%{customdata}: " + ("Σ w = " if rb.view.summed else "") + "%{y:.4f}<extra></extra>"))
    fig.update_xaxes(title=t("generation.cached_position", lang))
    if rb.tickvals is not None:
        fig.update_xaxes(tickmode="array", tickvals=rb.tickvals, ticktext=rb.ticktext, tickangle=-60)
    fig.update_yaxes(title=t("generation.weight", lang), range=[0, attnview.bar_top(rb.y)])
    full = attnview.titled(title, rb.note, width=80)
    fig = _layout(fig, full)
    if rb.note:
        fig.update_layout(margin=dict(t=attnview.title_top(full)))
    return fig


def prefill_matrix(mat: np.ndarray, tokens: Sequence[str], title: str, lang: str, start: int | None = None) -> go.Figure:
    """The prefill's [T, T] attention matrix of one layer/head (zero above the diagonal): whole and
    exact up to ``attnview.CELLS`` positions; beyond, averaged blocks (``start`` None) or a window of
    exact weights from ``start``. Ticks on every k-th position, every cell's tokens in the hover."""
    view = attnview.view(np.asarray(mat, dtype=np.float32), start)
    pos, labels = view.positions(), escape.plot_all(attnview.cell_labels(view, tokens))
    fig = go.Figure(go.Heatmap(z=attnview.hide_future(view.z, view), x=pos, y=pos, colorscale=palette.SEQUENTIAL, zmin=0, zmax=1,
                               customdata=np.array([[f"{r} → {c}" for c in labels] for r in labels]),
                               hovertemplate="%{customdata}: " + ("" if view.exact else t("attnview.mean_w", lang) + " = ") + "%{z:.4f}<extra></extra>"))
    idx = attnview.tick_index(view.n, 12)
    ticks = dict(tickmode="array", tickvals=[pos[i] for i in idx], ticktext=[labels[i] for i in idx])
    fig.update_xaxes(title=t("generation.key_pos", lang), tickangle=-60, **ticks)
    fig.update_yaxes(title=t("generation.query_pos", lang), autorange="reversed", **ticks)
    note = attnview.note(view, lang)
    full = attnview.titled(title, note, width=80)
    fig = _layout(fig, full, height=440)
    if note:
        fig.update_layout(margin=dict(t=attnview.title_top(full)))
    return fig


def kv_growth(kv_tokens: np.ndarray, kv_bytes: np.ndarray, lang: str) -> go.Figure:
    """Cache size after each pass: bytes (bars) and positions (line, right axis). Pass 0 = prefill."""
    steps = np.arange(len(kv_tokens))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=steps, y=kv_bytes / 1024, name=t("generation.kv_kib", lang), marker_color=PALETTE["kv"]), secondary_y=False)
    fig.add_trace(go.Scatter(x=steps, y=kv_tokens, name=t("generation.kv_positions", lang), mode="lines+markers",
                             line_color=PALETTE["decode"]), secondary_y=True)
    _pass_axis(fig, len(steps), title=t("generation.pass", lang))
    fig.update_yaxes(title=t("generation.kv_kib", lang), secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title=t("generation.kv_positions", lang), secondary_y=True, rangemode="tozero", showgrid=False,
                     dtick=_int_step(float(np.max(kv_tokens)) if len(kv_tokens) else 1.0))
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return _layout(fig, t("generation.fig_kv", lang))


def kv_layers(bytes_per_layer: np.ndarray, lang: str) -> go.Figure:
    """Bytes held by each layer's K and V right now."""
    fig = go.Figure(go.Bar(x=np.arange(len(bytes_per_layer)), y=bytes_per_layer / 1024, marker_color=PALETTE["kv"],
                           hovertemplate="%{x}: %{y:.1f} KiB<extra></extra>"))
    fig.update_xaxes(title=t("ui.layer", lang))
    fig.update_yaxes(title=t("generation.kv_kib", lang))
    return _layout(fig, t("generation.fig_kv_layers", lang), height=300)


def _int_step(vmax: float, ticks: int = 4) -> int:
    """A round whole-number tick step (1, 2, 5, 10, 20, …) giving about ``ticks`` ticks up to ``vmax``:
    positions are counted, so an axis never reads 11.3 or 22.7."""
    raw = max(1.0, vmax / ticks)
    mag = 10 ** int(np.floor(np.log10(raw)))
    return int(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))


def _pass_axis(fig: go.Figure, n: int, **kw: Any) -> None:
    """Whole-number pass ticks (never −0.4 … 0.4 around a single pass); thinned out past 20 passes."""
    fig.update_xaxes(range=[-0.5, max(n, 1) - 0.5], dtick=1 if n <= 20 else None, tickformat="d", **kw)


def timings(seconds: Sequence[float], lang: str, pure_tpot: float | None = None) -> go.Figure:
    """Measured wall time per pass: the prefill (TTFT) then each decode step, with the median of these
    decode passes (they recorded attention) and, if given, the one TPOT measured without recording."""
    s = np.asarray(seconds, dtype=float) * 1000
    colors = [PALETTE["prefill"]] + [PALETTE["decode"]] * (len(s) - 1)
    names = ["TTFT (prefill)"] + [f"TPOT {i}" for i in range(1, len(s))]
    fig = go.Figure(go.Bar(x=np.arange(len(s)), y=s, marker_color=colors, customdata=names,
                           hovertemplate="%{customdata}: %{y:.1f} ms<extra></extra>", showlegend=False))
    # The two reference lines are named in the legend, not by text on the plot: a label written at the
    # line's height lands on the bars around it and cannot be read on a projector.
    span = [-0.5, max(len(s), 1) - 0.5]
    if len(s) > 1:
        med = float(np.median(s[1:]))
        fig.add_trace(go.Scatter(x=span, y=[med, med], mode="lines", line=dict(dash="dot", color="#333333"),
                                 name=t("generation.median_tpot", lang), hovertemplate=f"{med:.1f} ms<extra></extra>"))
    if pure_tpot is not None:
        ms = pure_tpot * 1000
        fig.add_trace(go.Scatter(x=span, y=[ms, ms], mode="lines", line=dict(dash="dash", color=PALETTE["with"]),
                                 name=t("generation.pure_line", lang), hovertemplate=f"{ms:.1f} ms<extra></extra>"))
    _pass_axis(fig, len(s), title=t("generation.pass", lang))
    fig.update_yaxes(title="ms", rangemode="tozero")
    fig.update_layout(showlegend=True, legend=dict(orientation="h", y=-0.35, yanchor="top", x=0))
    return _layout(fig, t("generation.fig_time", lang), height=340)


def cache_compare(len_with: Sequence[int], s_with: Sequence[float], len_without: Sequence[int], s_without: Sequence[float],
                  lang: str) -> go.Figure:
    """Time of each new token against the sequence length, with and without the KV cache."""
    fig = go.Figure([
        go.Scatter(x=list(len_with), y=np.asarray(s_with) * 1000, mode="lines+markers", name=t("kv_cache.with", lang),
                   line=palette.line("with"), marker=palette.marker("with", size=7)),
        go.Scatter(x=list(len_without), y=np.asarray(s_without) * 1000, mode="lines+markers", name=t("kv_cache.without", lang),
                   line=palette.line("without"), marker=palette.marker("without", size=8)),
    ])
    fig.update_xaxes(title=t("kv_cache.seq_len", lang), tickformat=",d")  # lengths are whole tokens: never a 37.2 tick
    if len(set(len_with) | set(len_without)) <= 10:
        fig.update_xaxes(dtick=1)  # a short run: one tick per length
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
    # each name on two lines, level; the two splits stacked, bars lying down, the legend in a row above: the
    # figure reads the same at 390 px (a phone) as at 1,400 (side by side, the legend beside ran into the names)
    names = [n.replace("、", "<br>").replace(", ", ",<br>") for n in names]
    fig = make_subplots(rows=2, cols=1, subplot_titles=(t("kv_cache.time_split", lang), t("kv_cache.mem_split", lang)), vertical_spacing=0.2)
    fig.add_trace(go.Bar(y=names, x=list(ttft), orientation="h", name=t("kv_cache.dom_prefill", lang), marker_color=PALETTE["prefill"]), 1, 1)
    fig.add_trace(go.Bar(y=names, x=list(decode), orientation="h", name=t("kv_cache.decode_total", lang), marker_color=PALETTE["decode"],
                         marker_pattern_shape="/"), 1, 1)
    fig.add_trace(go.Bar(y=names, x=list(weights_gib), orientation="h", name=t("kv_cache.weights", lang), marker_color=PALETTE["weights"]), 2, 1)
    fig.add_trace(go.Bar(y=names, x=list(kv_gib), orientation="h", name=t("kv_cache.dom_kv", lang), marker_color=PALETTE["kv"],
                         marker_pattern_shape="/"), 2, 1)
    fig.update_yaxes(autorange="reversed")  # the first shape on top, as in the table above
    fig.update_layout(barmode="stack", legend=dict(orientation="h", x=0, xanchor="left", y=1.12, yanchor="bottom", traceorder="normal"))
    fig.update_xaxes(title="s", row=1, col=1)
    fig.update_xaxes(title="GiB", row=2, col=1)
    fig = _layout(fig, t("kv_cache.fig_workloads", lang), height=560)
    fig.update_layout(margin=dict(t=110))
    return fig


def segments_html(segments: Sequence[tuple[str, bool]]) -> str:
    """The templated text with its special tokens highlighted (line breaks kept)."""
    parts = []
    for s, sp in segments:
        e = html.escape(s)
        parts.append(f'<b style="background:#ffe0b2;color:#b23c00">{e}</b>' if sp else e)
    return ('<pre style="white-space:pre-wrap;font-size:0.9em;background:#fafafa;padding:8px;border-radius:6px">'
            + "".join(parts) + "</pre>")


# ---------------------------------------------------------------------------------------------
# The diagnose page (core.gen.diagnose): measured curves, the extrapolation, memory, temperature


def prefill_curve(points: Sequence[Any], fit: Any, machine: str, lang: str, extend_to: int | None = None) -> go.Figure:
    """Prefill medians (IQR as error bars) and tokenising medians against input length; the fitted
    a + b·n + c·n² with its linear and quadratic parts; past the last measured length (``extend_to``)
    the same curve dotted and labelled an extrapolation."""
    n = np.array([p.n_tokens for p in points], dtype=float)
    med = np.array([p.prefill.median for p in points])
    lo = med - np.array([p.prefill.q1 for p in points])
    hi = np.array([p.prefill.q3 for p in points]) - med
    top = float(n.max())
    xs = np.linspace(0, top, 120)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=n, y=med, mode="markers", name=t("diagnose.fig_prefill_measured", lang), marker=dict(size=9, color=PALETTE["prefill"]),
                             error_y=dict(type="data", array=hi, arrayminus=lo, visible=True)))
    fig.add_trace(go.Scatter(x=n, y=[p.tokenise.median for p in points], mode="markers+lines", name=t("diagnose.fig_tokenise", lang),
                             marker=palette.marker("third"), line=palette.line("third")))
    fig.add_trace(go.Scatter(x=xs, y=fit.predict(xs), mode="lines", name=t("diagnose.fig_fit", lang), line=dict(color=PALETTE["prefill"])))
    fig.add_trace(go.Scatter(x=xs, y=fit.b * xs, mode="lines", name=t("diagnose.fig_linear", lang), line=palette.line("linear")))
    fig.add_trace(go.Scatter(x=xs, y=fit.c * xs * xs, mode="lines", name=t("diagnose.fig_quadratic", lang), line=palette.line("quadratic")))
    if extend_to and extend_to > top:
        xe = np.linspace(top, extend_to, 120)
        fig.add_trace(go.Scatter(x=xe, y=fit.predict(xe), mode="lines", name=t("diagnose.fig_extrapolated", lang),
                                 line=dict(dash="dot", color=PALETTE["prefill"], width=3)))
        fig.add_vrect(x0=top, x1=extend_to, fillcolor="#fff3cd", opacity=0.45, line_width=0,
                      annotation_text=t("diagnose.fig_extrapolation_zone", lang), annotation_position="top left")
    fig.update_xaxes(title=t("diagnose.fig_input_tokens", lang), rangemode="tozero")
    fig.update_yaxes(title=t("diagnose.fig_seconds", lang), rangemode="tozero")
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return _layout(fig, t("diagnose.fig_prefill_title", lang, machine=machine), height=440)


def output_curve(cumulative: Sequence[float], ttft: float, tpot: float, machine: str, lang: str) -> go.Figure:
    """Time until output token k, measured, beside the straight line TTFT + k × TPOT."""
    k = np.arange(1, len(cumulative) + 1)
    fig = go.Figure([
        go.Scatter(x=k, y=list(cumulative), mode="lines+markers", name=t("diagnose.fig_measured_total", lang), line=dict(color=PALETTE["decode"])),
        go.Scatter(x=k, y=ttft + (k - 1) * tpot, mode="lines", name=t("diagnose.fig_n_tpot", lang), line=dict(dash="dash", color="#555")),
    ])
    fig.update_xaxes(title=t("diagnose.fig_output_tokens", lang))
    fig.update_yaxes(title=t("diagnose.fig_seconds", lang), rangemode="tozero")
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return _layout(fig, t("diagnose.fig_output_title", lang, machine=machine), height=380)


def tpot_curve(points: Sequence[Any], fit: Any, machine: str, lang: str) -> go.Figure:
    """One decode step's time (median, IQR as error bars, in ms) against the cache length it reads, with
    the fitted straight line TPOT(n) = a + b·n."""
    n = np.array([p.n_tokens for p in points], dtype=float)
    med = np.array([p.decode.median for p in points]) * 1e3
    lo = med - np.array([p.decode.q1 for p in points]) * 1e3
    hi = np.array([p.decode.q3 for p in points]) * 1e3 - med
    xs = np.linspace(0, float(n.max()), 60)
    fig = go.Figure([
        go.Scatter(x=n, y=med, mode="markers", name=t("diagnose.fig_tpot_measured", lang), marker=dict(size=9, color=PALETTE["decode"]),
                   error_y=dict(type="data", array=hi, arrayminus=lo, visible=True)),
        go.Scatter(x=xs, y=np.asarray(fit.predict(xs)) * 1e3, mode="lines", name=t("diagnose.fig_tpot_fit", lang),
                   line=dict(dash="dash", color="#555")),
    ])
    fig.update_xaxes(title=t("diagnose.fig_cache_tokens", lang), rangemode="tozero")
    fig.update_yaxes(title="ms", rangemode="tozero")
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return _layout(fig, t("diagnose.fig_tpot_title", lang, machine=machine), height=380)


def request_timeline(tokenise: float, prefill: float, steps: Sequence[float], machine: str, lang: str) -> go.Figure:
    """One request on a time axis: tokenise, prefill, then one bar per decode step; the first token
    arrives where the prefill ends — everything left of that line is the same with or without streaming."""
    names = [t("diagnose.tl_tokenise", lang), t("diagnose.tl_prefill", lang)] + [t("diagnose.tl_step", lang, k=i + 2) for i in range(len(steps))]
    durs = [tokenise, prefill, *steps]
    base = np.concatenate([[0.0], np.cumsum(durs)[:-1]])
    colours = [palette.colour("third"), PALETTE["prefill"]] + [PALETTE["decode"]] * len(steps)
    row = [t("diagnose.tl_row", lang)] * len(durs)
    fig = go.Figure(go.Bar(y=row, x=durs, base=base, orientation="h", marker_color=colours, marker_line_color="white", marker_line_width=1,
                           hovertext=names, hovertemplate="%{hovertext}: %{x:.4f} s<extra></extra>", showlegend=False))
    first = tokenise + prefill
    fig.add_vrect(x0=0, x1=first, fillcolor="#d0d0d0", opacity=0.35, line_width=0)
    fig.add_vline(x=first, line_width=3, line_color="black")
    # two rows of labels above the bar, so neither runs into the line however narrow the grey part is
    fig.add_annotation(x=first, y=1.0, yref="paper", yanchor="bottom", xanchor="left", showarrow=False,
                       text=f"◀ {t('diagnose.tl_first', lang)}")
    fig.add_annotation(x=0, y=1.0, xref="paper", yref="paper", yanchor="bottom", xanchor="left", yshift=22, showarrow=False,
                       text=f"<span style='color:#707070'>■</span> {t('diagnose.tl_untouched', lang)}")
    fig.update_xaxes(title=t("diagnose.tl_seconds", lang), rangemode="tozero")
    fig = _layout(fig, t("diagnose.tl_title", lang, machine=machine), height=300)
    fig.update_layout(margin=dict(t=110))
    return fig


def memory_plan(requests: Sequence[int], weights: float, kv: Sequence[float], act: Sequence[float], budget: float, limit: int,
                chosen: int, lang: str) -> go.Figure:
    """Weights (held once) + KV cache + activations (GB, stacked) against concurrent requests, the budget
    as a line and the last count that fits marked."""
    x = np.asarray(requests, dtype=float)
    gb = 1e9
    fig = go.Figure([
        go.Scatter(x=x, y=np.full(len(x), weights / gb), stackgroup="m", name=t("diagnose.mem_weights", lang), line=dict(color=PALETTE["weights"])),
        go.Scatter(x=x, y=np.asarray(kv, dtype=float) / gb, stackgroup="m", name=t("diagnose.mem_kv", lang), line=dict(color=PALETTE["kv"])),
        go.Scatter(x=x, y=np.asarray(act, dtype=float) / gb, stackgroup="m", name=t("diagnose.mem_act", lang), line=dict(color="#bcbd22")),
    ])
    fig.add_hline(y=budget / gb, line_dash="dash", line_color=palette.colour("accent"), annotation_text=t("diagnose.mem_budget_line", lang),
                  annotation_position="top left")
    if limit >= 1:
        fig.add_vline(x=limit, line_dash="dot", line_color=palette.colour("accent"), annotation_text=t("diagnose.mem_limit_line", lang, n=limit))
    fig.add_vline(x=chosen, line_color="black", line_width=1, annotation_text=t("diagnose.mem_chosen_line", lang, n=chosen),
                  annotation_position="bottom right")
    fig.update_xaxes(title=t("diagnose.mem_requests", lang))
    fig.update_yaxes(title="GB", rangemode="tozero")
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return _layout(fig, t("diagnose.mem_title", lang), height=420)


def temperature_bars(tokens: Sequence[str], temps: Sequence[float], question: np.ndarray, evidence: np.ndarray, lang: str) -> go.Figure:
    """The same candidates' probabilities at every temperature: the question alone (left) and with the
    evidence in the prompt (right)."""
    labels = rank_labels(tokens)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True,
                        subplot_titles=(t("diagnose.temp_alone", lang), t("diagnose.temp_evidence", lang)))
    shades = ["#08519c", "#3182bd", "#6baed6", "#bdd7e7", "#eff3ff"]
    for i, T in enumerate(temps):
        c = shades[i % len(shades)]
        fig.add_trace(go.Bar(x=labels, y=question[i], name=f"T = {T:g}", marker_color=c, legendgroup=str(T)), 1, 1)
        fig.add_trace(go.Bar(x=labels, y=evidence[i], name=f"T = {T:g}", marker_color=c, legendgroup=str(T), showlegend=False), 1, 2)
    fig.update_layout(barmode="group")
    fig.update_yaxes(title=t("diagnose.temp_prob", lang), range=[0, 1], row=1, col=1)
    return _layout(fig, t("diagnose.temp_title", lang), height=400)


# ---------------------------------------------------------------------------------------------
# the serving lab (core.gen.serving): a padded batch, and a workload through continuous batching

SERVE = {"wait": "#bdbdbd", "prefill": PALETTE["prefill"], "decode": PALETTE["decode"], "free": "#f4f4f4", "shared": "#000000"}


def padded_masks(batches: Sequence[Any], lang: str) -> go.Figure:
    """Each prompt's attention mask as its layers received it (rows: queries, columns: keys; dark = may
    read), for each padding side side by side. Pad positions are named on the axes, so the picture does
    not rest on colour alone."""
    B = len(batches[0].prompts)
    titles = [t("serving.mask_title", lang, b=b + 1, side=t(f"serving.side_{pb.side}", lang)) for b in range(B) for pb in batches]
    fig = make_subplots(rows=B, cols=len(batches), subplot_titles=titles, horizontal_spacing=0.08, vertical_spacing=0.12)
    for c, pb in enumerate(batches, start=1):
        T = pb.mask_2d.shape[1]
        for b in range(B):
            ticks = [str(i) if pb.mask_2d[b, i] else f"{i} pad" for i in range(T)]
            fig.add_trace(go.Heatmap(z=pb.mask_4d[b].astype(float), x=ticks, y=ticks, zmin=0, zmax=1, showscale=False,
                                     colorscale=[[0, "#ffffff"], [1, "#08306b"]], xgap=1, ygap=1,
                                     hovertemplate=t("serving.mask_hover", lang) + "<extra></extra>"), row=b + 1, col=c)
            fig.update_yaxes(autorange="reversed", row=b + 1, col=c, showticklabels=T <= 24)
            fig.update_xaxes(row=b + 1, col=c, showticklabels=T <= 24, tickangle=-90)
    return _layout(fig, t("serving.masks_fig", lang), height=260 * B + 60)


def serving_timeline(steps: Sequence[Any], ids: Sequence[str], lang: str) -> go.Figure:
    """Every forward step of the engine (x) and what each request (y) did in it: prefill (with how many
    prompt tokens: a long prompt is cut into chunks), decode (one token), or nothing. The cell text says
    it too (P n / D), so the picture does not rest on colour alone."""
    code = {rid: i for i, rid in enumerate(ids)}
    z = np.full((len(ids), len(steps)), np.nan)
    text = [["" for _ in steps] for _ in ids]
    for j, s in enumerate(steps):
        for rid, n in s.prefill.items():
            z[code[rid], j], text[code[rid]][j] = 2, f"P{n}"
        for rid in s.decode:
            z[code[rid], j], text[code[rid]][j] = 1, "D"
    x = list(range(len(steps)))
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=escape.plot_all(ids), text=text, texttemplate="%{text}" if len(steps) <= 40 else None, xgap=1, ygap=2, zmin=1, zmax=2,
        colorscale=[[0, SERVE["decode"]], [0.5, SERVE["decode"]], [0.5, SERVE["prefill"]], [1, SERVE["prefill"]]], showscale=False,
        customdata=[[f"{s.t_s:.3f}" for s in steps] for _ in ids],
        hovertemplate=t("serving.timeline_hover", lang) + "<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title=t("serving.request", lang), type="category")
    fig.update_xaxes(title=t("serving.step", lang))
    _pass_axis(fig, len(steps))
    return _layout(fig, t("serving.timeline_fig", lang), height=120 + 34 * len(ids))


def serving_gantt(requests: Sequence[Any], lang: str) -> go.Figure:
    """Each request from its arrival: waiting in the queue, prefill until its first token (TTFT), then
    decoding until it ends, on the engine's clock (seconds from the first arrival)."""
    fig = go.Figure()
    parts = (("wait", "arrival_s", "first_scheduled_s"), ("prefill", "first_scheduled_s", "first_token_s"),
             ("decode", "first_token_s", "finish_s"))
    for name, a, b in parts:
        rows = [r for r in requests if getattr(r, a) is not None and getattr(r, b) is not None]
        fig.add_trace(go.Bar(y=[escape.plot(r.id) for r in rows], x=[max(0.0, getattr(r, b) - getattr(r, a)) for r in rows],
                             base=[getattr(r, a) for r in rows], orientation="h", name=t(f"serving.phase_{name}", lang),
                             marker_color=SERVE[name], marker_pattern_shape={"wait": ".", "prefill": "/", "decode": ""}[name],
                             hovertemplate="%{y}: %{base:.2f} → %{x:.2f} s<extra>" + t(f"serving.phase_{name}", lang) + "</extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title=t("serving.seconds", lang))
    _layout(fig, t("serving.gantt_fig", lang), height=200 + 34 * len(requests))
    fig.update_layout(barmode="overlay", legend=dict(orientation="h", y=-0.45, yanchor="top"), margin=dict(b=80))
    return fig


def serving_blocks(steps: Sequence[Any], ids: Sequence[str], num_blocks: int, lang: str) -> go.Figure:
    """The paged KV cache over the run: one column per block, one row per step; a cell is the request
    holding that block (its number in the cell), "S" where two or more requests share it (a common
    prefix), empty where the block is free."""
    code = {rid: i for i, rid in enumerate(ids)}
    z = np.full((len(steps), num_blocks), np.nan)
    text = [["" for _ in range(num_blocks)] for _ in steps]
    who = [["" for _ in range(num_blocks)] for _ in steps]
    for j, s in enumerate(steps):
        owners: dict[int, list[str]] = {}
        for rid, blocks in s.blocks.items():
            for blk in blocks:
                if 0 <= blk < num_blocks:
                    owners.setdefault(blk, []).append(rid)
        for blk, rids in owners.items():
            shared = len(rids) > 1
            z[j, blk] = -1 if shared else code[rids[0]]
            text[j][blk] = "S" if shared else str(code[rids[0]] + 1)
            who[j][blk] = escape.plot(", ".join(rids))
    n = max(1, len(ids))
    scale = [[0, SERVE["shared"]], [0.5 / (n + 1), SERVE["shared"]]]
    qual = ["#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b", "#9d755d", "#bab0ac", "#ff9da6"]
    for i in range(n):
        lo, hi = (i + 0.5) / (n + 1), (i + 1.5) / (n + 1)
        scale += [[lo, qual[i % len(qual)]], [hi, qual[i % len(qual)]]]
    scale[-1][0] = 1.0
    show_text = num_blocks * len(steps) <= 1600
    fig = go.Figure(go.Heatmap(z=z, text=text, texttemplate="%{text}" if show_text else None, customdata=who, zmin=-1.5, zmax=n - 0.5,
                               colorscale=scale, showscale=False, xgap=1, ygap=1,
                               hovertemplate=t("serving.blocks_hover", lang) + "<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title=t("serving.step", lang))
    fig.update_xaxes(title=t("serving.block", lang))
    return _layout(fig, t("serving.blocks_fig", lang), height=min(700, 140 + 14 * len(steps)))


def serving_memory(memory: dict[str, Any], lang: str) -> go.Figure:
    """The block pool against what the requests needed at their longest, the peak the engine held, and a
    contiguous cache of the model's whole context for every request."""
    keys = ("peak_bytes_used", "needed_bytes", "pool_bytes_data", "contiguous_max_length_bytes")
    vals = [float(memory.get(k) or 0) / 2**20 for k in keys]
    fig = go.Figure(go.Bar(x=[t(f"serving.mem_{k}", lang) for k in keys], y=vals, marker_color=[SERVE["prefill"], palette.OKABE_ITO["grey"], PALETTE["kv"], PALETTE["without"]],
                           text=[f"{v:,.1f} MiB" for v in vals], textposition="outside", hovertemplate="%{x}: %{y:,.2f} MiB<extra></extra>"))
    pos = [v for v in vals if v > 0]
    if pos and max(pos) > 30 * min(pos):  # a contiguous cache of the whole context dwarfs the rest: powers of ten
        fig.update_yaxes(type="log", dtick=1, tickformat=",~g")
    fig.update_yaxes(title="MiB")
    return _layout(fig, t("serving.memory_fig", lang), height=340)


# ---------------------------------------------------------------------------------------------
# Decoding speed-ups (pages/decoding.py, core/gen/speedups.py)

DRAFT_MARKS = {"accepted": ("with", "✓"), "rejected": ("without", "✗"), "model": ("decode", "+")}


def spec_rounds(rows: Sequence[Sequence[tuple[str, str]]], lang: str) -> go.Figure:
    """Speculation round by round: ``rows[r]`` is round r's (token label, kind) in order, kind "accepted" /
    "rejected" (drafts) or "model" (the token the verifying pass added itself). Kinds differ by colour,
    marker shape and a mark before the token (✓ ✗ +), so none is told by colour alone."""
    fig = go.Figure()
    for kind, (role, mark) in DRAFT_MARKS.items():
        xs, ys, texts = [], [], []
        for r, row in enumerate(rows):
            for i, (tok, k) in enumerate(row):
                if k == kind:
                    xs.append(i)
                    ys.append(r + 1)
                    texts.append(f"{mark} {escape.plot(tok)}")
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers+text", text=texts, textposition="middle right",
                                 marker=palette.marker(role, size=12), name=f"{mark} {t('decoding.kind_' + kind, lang)}",
                                 hovertemplate="%{text}<extra></extra>"))
    n = max(1, len(rows))
    fig.update_yaxes(title=t("decoding.round", lang), autorange="reversed", dtick=1, range=[n + 0.5, 0.5])
    fig.update_xaxes(title=t("decoding.slot", lang), dtick=1, range=[-0.5, max((len(r) for r in rows), default=1) + 1.5])
    fig.update_layout(legend=dict(orientation="h", y=-0.2, yanchor="top"))
    return _layout(fig, t("decoding.fig_rounds", lang), height=max(260, 40 + 34 * n))


def ratio_bars(labels: Sequence[str], medians: Sequence[float], lo: Sequence[float], hi: Sequence[float], title: str,
               axis: str, lang: str) -> go.Figure:
    """Ratios (median, with the min–max of the runs as error bars) beside the line at 1 (no change)."""
    fig = go.Figure(go.Bar(x=list(labels), y=list(medians), marker_color=PALETTE["with"],
                           error_y=dict(type="data", symmetric=False, array=[h - m for h, m in zip(hi, medians, strict=True)],
                                        arrayminus=[m - lo_ for m, lo_ in zip(medians, lo, strict=True)]),
                           hovertemplate="%{x}: %{y:.2f}×<extra></extra>"))
    fig.add_hline(y=1.0, line=palette.line("weights"), annotation_text=t("decoding.no_change", lang))
    fig.update_yaxes(title=axis, rangemode="tozero")
    return _layout(fig, title)


def variant_lines(series: dict[str, Sequence[float]], x_title: str, y_title: str, title: str, log: bool = False) -> go.Figure:
    """One line per precision variant (colour, dash and marker of its own), e.g. KL per position or drift per layer."""
    roles = ("main", "second", "third", "accent", "kv", "weights")
    fig = go.Figure()
    for (name, ys), role in zip(series.items(), itertools.cycle(roles)):
        fig.add_trace(go.Scatter(y=list(ys), mode="lines+markers", name=name, line=palette.line(role),
                                 marker=palette.marker(role, size=6), hovertemplate=f"{name}: %{{y:.3g}}<extra></extra>"))
    fig.update_xaxes(title=x_title)
    fig.update_yaxes(title=y_title, type="log" if log else "linear")
    fig.update_layout(legend=dict(orientation="h", y=-0.25, yanchor="top"))
    return _layout(fig, title)


def timing_bars(labels: Sequence[str], medians: Sequence[float], q1: Sequence[float], q3: Sequence[float], title: str,
                lang: str) -> go.Figure:
    """Milliseconds per token per kernel: the median, its interquartile range as error bars."""
    ms = [m * 1e3 for m in medians]
    fig = go.Figure(go.Bar(x=list(labels), y=ms, marker_color=PALETTE["decode"],
                           error_y=dict(type="data", symmetric=False, array=[(b - m) * 1e3 for b, m in zip(q3, medians, strict=True)],
                                        arrayminus=[(m - a) * 1e3 for m, a in zip(medians, q1, strict=True)]),
                           hovertemplate="%{x}: %{y:.1f} ms<extra></extra>"))
    fig.update_yaxes(title=t("decoding.ms_per_token", lang), rangemode="tozero")
    return _layout(fig, title)
