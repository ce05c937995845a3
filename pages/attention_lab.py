"""Attention calculator: softmax(QKᵀ/√d_k + M)·V, five steps, editable, on the seeds' examples and
on one real row of the current prompt; plus why we scale, and what n² costs."""

from __future__ import annotations

import numpy as np
import streamlit as st

from core.common.numbers import max_abs_diff
from core.common.paths import asset
from core.common.timing import BUSY_SPREAD
from core.maths import attention as A
from core.maths import figures as P
from core.plot import attnview
from core.web import cache, page, presenter, ui, widgets

PRESETS = ("worked", "seed42", "real")
# arrays, axis labels, the editor-key versions of Q/K/V and of the mask (a new example starts fresh
# editors, while the worked example's "Unmask" box changes only the mask: an edited Q survives it), and
# the keys shown (a long prompt's real row: a window of them; the softmax still runs over every key)
Example = tuple[dict[str, np.ndarray], A.CalculatorLabels, str, str, slice]
ALL = slice(None)


def _edit(arr: np.ndarray, rows: list[str], cols: list[str], key: str) -> np.ndarray:
    """An editable table; an emptied cell counts as 0 (or hidden, for the mask)."""
    df = st.data_editor(P.matrix_frame(arr, rows, cols), key=key, width="stretch")
    return df.fillna(False if arr.dtype == bool else 0.0).to_numpy(dtype=arr.dtype)


def _scale_tab(lang: str) -> None:
    st.markdown(ui.t("attention_lab.scale_intro"))
    res = cache.scale_experiment(A.SCALE_D_VALUES)
    d = st.select_slider("d_k", A.SCALE_D_VALUES, value=64, key="attention_lab_dk")
    r = A.scale_readout(res, d)
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("attention_lab.fig_std_meas"), r["std"])
    m1.caption(r["sqrt"])  # the value to compare with, not a rise or fall
    m2.metric(ui.t("attention_lab.fig_unscaled"), r["unscaled"])
    m3.metric(ui.t("attention_lab.fig_scaled"), r["scaled"])
    presenter.chart(P.scale_figure(res, lang), width="stretch")
    ui.badge("formula", ui.t("attention_lab.scale_detail"))


def _cost_tab(lang: str) -> None:
    st.markdown(ui.t("attention_lab.cost_intro"))
    st.table(A.cost_table_view(A.cost_table(A.COST_LENGTHS, ui.t("attention_lab.elements"), ui.t("attention_lab.ratio"))),
             hide_index=True)  # six rows: a plain table, drawn exactly as formatted ("—", never "None")
    ui.badge("formula")
    loaded = ui.loaded_model()
    if loaded is None:
        return
    with st.spinner(ui.t("attention_lab.timing_measuring")):  # medians of repeated, interleaved runs (core.maths.attention)
        timing = cache.attention_timing(loaded)  # once per server process, shared by every session, until "Measure again"
    presenter.chart(P.complexity_figure(timing["n"], timing["ms"], lang, timing["q1"], timing["q3"], np.asarray(A.COST_LENGTHS)),
                    width="stretch")  # the formula over the table's lengths; the clock up to 8K (the text's 4K → 8K)
    ui.badge("measured", ui.t("attention_lab.timing_detail", reps=timing["reps"]))
    if timing["n_busy"]:  # a wide spread: the median is only a rough guide
        st.warning(ui.t("attention_lab.timing_busy", n=timing["n_busy"], pct=round(BUSY_SPREAD * 100)))
    when, again = st.columns([4, 1], vertical_alignment="center")
    label = ui.t("attention_lab.time_again")
    when.caption(ui.t("attention_lab.timing_when", when=f"{timing['measured_at']:%Y-%m-%d %H:%M:%S}", button=label))
    # the callback drops the shared measurement before the rerun, which measures anew under the spinner above
    again.button(label, key="attention_lab_time_again", on_click=cache.attention_timing.clear, args=(loaded,))
    _reference(timing)
    _implementations()


def _reference(timing: dict) -> None:
    """The reference shipped in assets/ (its machine and date) as the number to quote, beside the live run,
    which stays labelled as this server's, now."""
    st.header(ui.t("attention_lab.ref_title"))
    ref = A.load_reference(asset(A.REFERENCE_FILE))
    labels = {"ref": ui.t("attention_lab.ref_col"), "iqr": ui.t("attention_lab.ref_iqr"), "live": ui.t("attention_lab.live_col")}
    presenter.frame(A.reference_frame(ref, timing, labels).style.format({labels["ref"]: "{:,.2f}", labels["live"]: "{:,.2f}"}, na_rep="—"),
                    hide_index=True, width="stretch")
    st.caption(ui.t("attention_lab.ref_where", machine=ref["machine"], date=ref["date"], torch=ref["torch"], reps=ref["reps"]))
    if ref["busy"]:  # said beside the numbers, never hidden
        st.caption(ui.t("attention_lab.ref_busy", n=ref["n_busy"]))
    ui.badge("measured")


def _implementations() -> None:
    """SDPA, eager and a tiled online softmax (FlashAttention's idea) on the same inputs: one answer."""
    st.header(ui.t("attention_lab.impl_title"))
    c = A.compare_implementations()
    st.markdown(ui.t("attention_lab.impl_intro", n=c["n"], h=c["heads"], dh=c["head_dim"], b=c["block"]))
    rows = [{ui.t("attention_lab.impl_col_name"): ui.t(f"attention_lab.impl_{k}"), ui.t("attention_lab.impl_col_err"): err,
             ui.t("attention_lab.impl_col_ratio"): ratio} for k, err, ratio in A.implementation_rows(c)]
    st.table(rows, hide_index=True)
    st.markdown(ui.t("attention_lab.impl_verdict", err=f"{max(c['max_err'].values()):.1e}", largest=f"{c['largest']:.2f}"))
    ui.badge("measured", ui.t("attention_lab.impl_badge"))


def _real_example() -> Example | None:
    """One query row of the current prompt, picked by layer, head and position; None without a trace."""
    tr = ui.current_trace()
    if tr is None:
        return None
    layer, head = widgets.layer_head_pickers("attention_lab", tr.n_layers, tr.n_heads)
    pos = widgets.int_slider(ui.t("ui.position"), 0, tr.n_tokens - 1, ui.qp_int("pos", tr.n_tokens - 1, 0, tr.n_tokens - 1),
                             key="attention_lab_pos")
    ui.set_qp(pos=pos)
    if ui.site(tr, "attn_pattern", layer) is None:  # derives the layer once (a spinner meanwhile), or says why not
        return None
    ex = A.real_row(tr, layer, head, pos, cache.door(tr))
    st.caption(ui.t("attention_lab.real_kv", h=head, g=int(ex["kv_head"]), size=tr.geometry.group_size))
    keys = _key_window(tr.n_tokens, pos)
    version = f"real{layer}_{head}_{pos}_{tr.n_tokens}_{keys.start}"
    return ex, A.calculator_labels(ex, tr.tokens, pos), version, version, keys


def _key_window(T: int, pos: int) -> slice:
    """All keys up to ``attnview.CELLS``; beyond, a window of that many (URL ``keys``: its first key;
    by default the window that ends at the query), so the editors, tables and figures stay readable."""
    window = A.key_window_start(T, pos, attnview.CELLS)
    if window is None:
        return ALL
    hi, first = window
    a = widgets.int_slider(ui.t("attention_lab.key_start"), 0, hi, ui.qp_int("keys", first, 0, hi), key="attention_lab_keys")
    ui.set_qp(keys=a)
    return slice(a, a + attnview.CELLS)


def _example(preset: str) -> Example | None:
    """(arrays, axis labels, version): the version keys the editors, so a new example starts fresh."""
    if preset == "real":
        return _real_example()
    unmask = preset == "worked" and st.checkbox(ui.t("attention_lab.unmask"), key="attention_lab_unmask")
    return (*A.preset_example(preset, unmask), ALL)


def _inputs(ex: dict[str, np.ndarray], lab: A.CalculatorLabels, version: str, mask_version: str,
            keys: slice) -> tuple[np.ndarray, ...]:
    """Q, K, V and the mask as editable tables (the rows of K and V, and the mask's columns, of the
    ``keys`` shown); returns the whole arrays with what the user left in the shown part."""
    c1, c2, c3 = st.columns(3)
    out = []
    for col, name, rows, cols in ((c1, "q", lab.q, lab.dk), (c2, "k", lab.k[keys], lab.dk), (c3, "v", lab.k[keys], lab.dv)):
        part = ex[name] if name == "q" else ex[name][keys]
        with col:
            st.markdown(f"**{name.upper()}** `[{ex[name].shape[0]}, {ex[name].shape[1]}]`")
            out.append(A.put_rows(ex[name], keys if name != "q" else ALL, _edit(part, rows, cols, f"attention_lab_{name}_{version}")))
    st.markdown(ui.t("attention_lab.mask_label"))
    mask = ex["mask"].copy()
    mask[:, keys] = _edit(ex["mask"][:, keys], lab.q, lab.k[keys], f"attention_lab_mask_{mask_version}")
    return (*out, mask)


def _steps(steps: A.AttentionSteps, lab: A.CalculatorLabels, lang: str, keys: slice, picture) -> None:
    """Each step's numbers (for the ``keys`` shown), the row check over every key, and the weights' figure in
    ``picture`` (the tab's first screen, above the inputs)."""
    with picture:
        presenter.chart(P.weights_figure(steps.weights[:, keys], ~np.isfinite(steps.masked[:, keys]), ui.t("attention_lab.fig_weights"),
                                         lab.q, lab.k[keys], lang), width="stretch", key="attention_lab_weights")
        st.caption(ui.t("attention_lab.weights_colours"))
    for i, (name, arr) in enumerate(steps.as_dict().items(), start=1):
        st.markdown(ui.t(f"attention_lab.step_{name}", n=i, s=f"{steps.scale:.4g}"))
        shown, cols = (arr, lab.dv) if name == "output" else (arr[:, keys], lab.k[keys])
        presenter.frame(P.matrix_frame(shown, lab.q, cols).style.format(P.cell_text), width="stretch")
    presenter.frame(A.weights_check_table(steps.weights, lab.q, lang).style.format({ui.t("attention_lab.row_sum"): "{:.4f}"}))
    if keys != ALL:  # say that the softmax ran over every key, and what the hidden ones hold
        n = steps.weights.shape[-1]
        st.caption(ui.t("attention_lab.key_window", a=keys.start, b=min(keys.stop, n) - 1, T=n,
                        rest=f"{A.hidden_mass(steps.weights, keys):.3f}"))


def _calc_tab(lang: str) -> None:
    names = {p: ui.t(f"attention_lab.preset_{p}") for p in PRESETS}  # fixed now: the label is this run's language
    preset = st.radio(ui.t("attention_lab.preset"), PRESETS, format_func=names.get, horizontal=True, key="attention_lab_preset")
    picture = st.container()  # the weights first, on the first screen; the example and the editable inputs that set them under them
    st.caption(ui.t(f"attention_lab.about_{preset}"))
    chosen = _example(preset)
    if chosen is None:
        return
    ex, lab, version, mask_version, keys = chosen
    q, k, v, mask = _inputs(ex, lab, version, mask_version, keys)
    d_k = ex["q"].shape[1]
    # one box per preset: unticking it for the tutorial's example must not silently unscale the real row
    scaled = st.checkbox(ui.t("attention_lab.use_scale", d=d_k), value=True, key=f"attention_lab_scaled_{preset}")
    steps = A.attention_steps(q, k, v, mask, scale=None if scaled else 1.0)
    _steps(steps, lab, lang, keys, picture)
    ref = ex.get("reference")
    if ref is not None:
        st.metric(ui.t("attention_lab.max_diff"), f"{max_abs_diff(steps.weights[0], ref):.2e}")
        if not scaled:  # the model divides by √d_k: say how far the unscaled row is from it, and why
            st.warning(ui.t("attention_lab.unscaled_real", d=d_k, s=f"{np.sqrt(d_k):.4g}",
                            diff=f"{max_abs_diff(steps.weights[0], ref):.2f}"))
        presenter.chart(P.compare_row_figure(steps.weights[0], ref, lab.k, lang, None if keys == ALL else keys.start), width="stretch")
    ui.badge("model" if ref is not None else "formula")


def render() -> None:
    lang, keys = ui.lang(), ("calc", "scale", "cost")
    names = [ui.t(f"attention_lab.tab_{k}") for k in keys]
    tabs = widgets.tabs_url(keys, names, key="attention_lab_tab")  # a link opens the tab it names (?tab=cost)
    with tabs[1]:
        _scale_tab(lang)
    with tabs[2]:
        _cost_tab(lang)
    with tabs[0]:  # last, so that a missing trace (return) leaves the other tabs drawn
        _calc_tab(lang)


page.run(render)
