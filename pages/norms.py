"""Architecture choices: LayerNorm vs RMSNorm on a real residual vector; Pre-Norm vs Post-Norm (the
residual stream's size through the blocks of seeded toys of each placement and of the real model); the
three Transformer families; recurrence vs attention, measured; the Q/K/V metaphor."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.engine.tokens import position_labels
from core.learn import comparisons
from core.maths import figures as P
from core.maths import norms as N
from core.maths import recurrence
from core.web import nav, page, presenter, ui, widgets

TABS = ("vector", "placement", "families", "rnn", "qkv")


def _vector_tab(lang: str) -> None:
    tr = ui.current_trace()
    if tr is None:  # the formulas still say what the picture would show
        st.markdown(ui.t("norms.vector_intro"))
        return
    picture = st.container()  # the picture first, on the first screen; the vector's choice and the formulas under it
    c1, c2 = st.columns(2)
    layer = widgets.int_slider(ui.t("norms.boundary"), 0, tr.n_layers, min(3, tr.n_layers), key="norms_layer", where=c1)
    pos = widgets.int_slider(ui.t("ui.position"), 0, tr.n_tokens - 1, tr.n_tokens - 1, key="norms_pos", where=c2)
    c3, c4 = st.columns(2)
    shift = c3.slider(ui.t("norms.shift"), -2.0, 2.0, 0.0, 0.25, key="norms_shift")
    scale = c4.slider(ui.t("norms.scale"), 0.25, 4.0, 1.0, 0.25, key="norms_scale")
    x = tr.resid[layer, pos]
    c = N.compare(x, shift * N.rms(x), scale)
    with picture:
        st.caption(ui.t("norms.which", l=layer, p=position_labels(tr.tokens)[pos], d=len(x)))
        presenter.chart(P.norm_vector_figure(c.x, c.layer, c.rms, lang), width="stretch", key="norms_fig_vector")
    st.markdown(ui.t("norms.vector_intro"))
    names = {"x": "x", "layernorm": "LayerNorm(x)", "rmsnorm": "RMSNorm(x)"}
    rows = [(names[k], f"{m:.4f}", f"{s:.4f}", f"{r:.4f}") for k, m, s, r in N.stats_rows(c)]
    st.table(pd.DataFrame(rows, columns=[ui.t("norms.col_vector"), ui.t("norms.col_mean"), ui.t("norms.col_std"), "RMS"]),
             hide_index=True)
    st.markdown(ui.t("norms.vector_after"))
    ui.badge("model")


def _placement_tab(lang: str) -> None:
    st.markdown(ui.t("norms.placement_intro"))
    norm = st.radio(ui.t("norms.norm_kind"), ("layernorm", "rmsnorm"), horizontal=True, key="norms_kind",
                    format_func=lambda k: {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[k])
    g = N.growth(norm)
    presenter.chart(P.growth_figure(g, N.GROWTH_D**0.5, lang), width="stretch", key="norms_fig_growth")
    st.markdown(ui.t("norms.growth_caption", d=N.GROWTH_D, t=N.GROWTH_TOKENS, seed=N.GROWTH_SEED, **N.growth_readout(g)))
    ui.badge("toy", ui.t("norms.untrained"))
    loaded, tr = ui.loaded_model(), ui.current_trace()
    if loaded is None or tr is None:
        return
    st.header(ui.t("norms.real_title"))
    v = N.trace_norms(tr)
    presenter.chart(P.stream_norm_figure(v, loaded.facts.name, lang), width="stretch", key="norms_fig_real")
    st.markdown(ui.t("norms.real_caption", name=widgets.md(loaded.facts.name), kind=loaded.facts.norm_type,
                     place=loaded.facts.norm_placement, first=f"{v[0]:.2f}", last=f"{v[-1]:.2f}", n=tr.n_layers,
                     peak=f"{v.max():.2f}", at=int(v.argmax())))
    ui.badge("model")


def _table(name: str) -> None:
    st.table(comparisons.table(name, ui.lang()), hide_index=True)  # short text cells: wrapped, never cut


def _families_tab() -> None:
    st.markdown(ui.t("arch.families_intro"))
    _table("families")
    st.markdown(ui.t("arch.families_after"))
    nav.page_link("masks", label=ui.t("arch.masks_link"), icon="🎭")


def _rnn_tab(lang: str) -> None:
    st.markdown(ui.t("arch.rnn_intro"))
    _table("rnn")
    res = recurrence.reach()
    presenter.chart(P.reach_figure(res.rnn, res.attention, lang), width="stretch", key="norms_fig_reach")
    st.markdown(ui.t("arch.rnn_caption", d=recurrence.REACH_D, seed=recurrence.REACH_SEED, **recurrence.reach_readout(res)))
    ui.badge("formula", ui.t("norms.untrained"))
    nav.page_link("training", label=ui.t("arch.training_link"), icon="🏋️")


def _qkv_tab() -> None:
    st.markdown(ui.t("arch.qkv_intro"))
    _table("qkv")
    st.markdown(ui.t("arch.qkv_after"))
    nav.page_link("context", label=ui.t("arch.context_link"), icon="🍎")


def render() -> None:
    lang = ui.lang()
    tabs = widgets.tabs_url(TABS, [ui.t(f"norms.tab_{k}") for k in TABS], key="norms_tab")  # a link opens one (?tab=rnn)
    with tabs[0]:
        _vector_tab(lang)
    with tabs[1]:
        _placement_tab(lang)
    with tabs[2]:
        _families_tab()
    with tabs[3]:
        _rnn_tab(lang)
    with tabs[4]:
        _qkv_tab()


page.run(render)
