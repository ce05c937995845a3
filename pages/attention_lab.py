"""Attention calculator: softmax(QKᵀ/√d_k + M)·V, five steps, editable, on the seeds' examples and
on one real row of the current prompt; plus why we scale, and what n² costs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from core.engine.tokens import position_label
from core.maths import attention as A
from core.maths import figures as P
from core.web import cache, presenter, ui

PRESETS = ("worked", "seed42", "real")
D_VALUES = tuple(2**i for i in range(11))  # 1 … 1024


def _edit(arr: np.ndarray, rows: list[str], cols: list[str], key: str) -> np.ndarray:
    """An editable table; an emptied cell counts as 0 (or hidden, for the mask)."""
    df = st.data_editor(P.matrix_frame(arr, rows, cols), key=key, width="stretch")
    return df.fillna(False if arr.dtype == bool else 0.0).to_numpy(dtype=arr.dtype)


def _names(prefix: str, n: int, tokens=None) -> list[str]:
    return [f"{prefix}{i}" if tokens is None else f"{prefix}{position_label(tokens, i)}" for i in range(n)]


def _scale_tab(lang: str) -> None:
    st.markdown(ui.t("attention_lab.scale_intro"))
    res = cache.scale_experiment(D_VALUES)
    d = st.select_slider("d_k", D_VALUES, value=64, key="attention_lab_dk")
    i = D_VALUES.index(d)
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("attention_lab.fig_std_meas"), f"{res['dot_std'][i]:.2f}", f"√d_k = {np.sqrt(d):.2f}", delta_color="off")
    m2.metric(ui.t("attention_lab.fig_unscaled"), f"{res['max_unscaled'][i]:.3f}")
    m3.metric(ui.t("attention_lab.fig_scaled"), f"{res['max_scaled'][i]:.3f}")
    st.plotly_chart(P.scale_figure(res, lang), width="stretch")
    ui.badge("formula", ui.t("attention_lab.scale_detail"))


def _cost_tab(lang: str) -> None:
    st.markdown(ui.t("attention_lab.cost_intro"))
    st.dataframe(A.cost_table([1024, 2048, 4096, 8192, 16384, 32768], ui.t("attention_lab.elements"), ui.t("attention_lab.ratio")),
                 hide_index=True)
    ui.badge("formula")
    timing = cache.attention_timing(ui.model_spec())
    st.plotly_chart(P.complexity_figure(timing["n"], timing["ms"], lang), width="stretch")
    ui.badge("measured", ui.t("attention_lab.timing_detail"))


def render() -> None:
    ui.header("page.attention_lab", "attention_lab.intro")
    lang, tabs = ui.lang(), st.tabs([ui.t(f"attention_lab.tab_{k}") for k in ("calc", "scale", "cost")])
    with tabs[1]:
        _scale_tab(lang)
    with tabs[2]:
        _cost_tab(lang)
    with tabs[0]:  # last, so that a missing trace (return) leaves the other tabs drawn
        names = {p: ui.t(f"attention_lab.preset_{p}") for p in PRESETS}  # fixed now: the label is this run's language
        preset = st.radio(ui.t("attention_lab.preset"), PRESETS, format_func=names.get, horizontal=True, key="attention_lab_preset")
        st.caption(ui.t(f"attention_lab.about_{preset}"))
        tokens, ref, version = None, None, preset
        if preset == "worked":
            unmask = st.checkbox(ui.t("attention_lab.unmask"), key="attention_lab_unmask")
            ex, version = A.worked_example(unmask), f"worked{unmask}"
        elif preset == "seed42":
            ex = {k: v[0] if v.ndim == 3 else v for k, v in A.seed42_example().items()}  # drop batch 1
        else:
            tr = ui.current_trace()
            if tr is None:
                return
            layer, head = ui.layer_head_pickers("attention_lab", tr.n_layers, tr.n_heads)
            pos = st.slider(ui.t("ui.position"), 0, tr.n_tokens - 1, ui.qp_int("pos", tr.n_tokens - 1, 0, tr.n_tokens - 1),
                            key="attention_lab_pos")
            ui.set_qp(pos=pos)
            ex, tokens, version = A.real_row(tr, layer, head, pos), tr.tokens, f"real{layer}_{head}_{pos}_{tr.n_tokens}"
            ref = ex["reference"]
            st.caption(ui.t("attention_lab.real_kv", h=head, g=int(ex["kv_head"]), size=tr.n_heads // tr.n_kv_heads))
        tq, tk, dk, dv = ex["q"].shape[0], ex["k"].shape[0], ex["q"].shape[1], ex["v"].shape[1]
        qrows = _names("q", tq) if tokens is None else [f"q{position_label(tokens, pos)}"]
        krows = _names("k", tk, tokens)
        c1, c2, c3 = st.columns(3)
        with c1:
            st.markdown(f"**Q** `[{tq}, {dk}]`")
            q = _edit(ex["q"], qrows, _names("d", dk), f"attention_lab_q_{version}")
        with c2:
            st.markdown(f"**K** `[{tk}, {dk}]`")
            k = _edit(ex["k"], krows, _names("d", dk), f"attention_lab_k_{version}")
        with c3:
            st.markdown(f"**V** `[{tk}, {dv}]`")
            v = _edit(ex["v"], krows, _names("d", dv), f"attention_lab_v_{version}")
        st.markdown(ui.t("attention_lab.mask_label"))
        mask = _edit(ex["mask"], qrows, krows, f"attention_lab_mask_{version}")
        scaled = st.checkbox(ui.t("attention_lab.use_scale", d=dk), value=True, key="attention_lab_scaled")
        steps = A.attention_steps(q, k, v, mask, scale=None if scaled else 1.0)
        for i, (name, arr) in enumerate(steps.as_dict().items(), start=1):
            st.markdown(ui.t(f"attention_lab.step_{name}", n=i, s=f"{steps.scale:.4g}"))
            if name == "weights":
                st.plotly_chart(P.matrix_figure(arr, ui.t("attention_lab.fig_weights"), qrows, krows, lang), width="stretch")
            cols = krows if name != "output" else _names("d", dv)
            st.dataframe(P.matrix_frame(arr, qrows, cols).style.format("{:.4f}"), width="stretch")
        st.dataframe(pd.DataFrame({ui.t("attention_lab.row_sum"): steps.weights.sum(-1),
                                   ui.t("attention_lab.nonzero"): (steps.weights > 0).sum(-1)}, index=qrows))
        if ref is not None:
            st.metric(ui.t("attention_lab.max_diff"), f"{np.abs(steps.weights[0] - ref).max():.2e}")
            st.plotly_chart(P.compare_row_figure(steps.weights[0], ref, krows, lang), width="stretch")
        ui.badge("model" if ref is not None else "formula")


render()
presenter.sources("attention")
