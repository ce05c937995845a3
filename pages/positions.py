"""Positions: the sinusoidal encoding, learned vs RoPE, RoPE as rotating 2-D pairs, the
relative-offset property, and RoPE reproducing the real model's queries."""

from __future__ import annotations

import streamlit as st

from core.maths import figures as P
from core.maths import positions as R
from core.web import cache, nav, presenter, ui, widgets


def _sin_tab(lang: str) -> None:
    st.markdown(ui.t("positions.sin_intro"))
    c1, c2 = st.columns(2)
    T = c1.slider(ui.t("positions.T"), 8, 256, 64, key="positions_T")
    d = c2.slider(ui.t("positions.d"), 8, 256, 128, step=2, key="positions_d")
    pe = R.sinusoidal(T, d)
    presenter.chart(P.sinusoidal_figure(pe, lang), width="stretch")
    ui.badge("formula")
    st.caption(R.sinusoidal_check_text(pe, lang))


def _kinds_tab(loaded, lang: str) -> None:
    st.markdown(ui.t("positions.kinds_intro"))
    st.table(R.methods_table(lang), hide_index=True)  # short text table: wrapped, never cut
    if loaded is not None:
        st.info(ui.t("positions.this_model", name=widgets.md(loaded.facts.name), kind=loaded.facts.position_type))
    nav.page_link("toy", label=ui.t("positions.toy_link"), icon="🧪")


def _rope_tab(theta: float, dh: int, lang: str) -> None:
    st.markdown(ui.t("positions.rope_intro", th=f"{theta:g}"))
    c1, c2 = st.columns(2)
    pair = widgets.int_slider(ui.t("positions.pair"), 0, dh // 2 - 1, 4, key="positions_pair", where=c1)
    pos = c2.slider(ui.t("ui.position"), 0, R.PAIR_POSITIONS - 1, 3, key="positions_pos")
    th_i, traj = R.rope_pair_demo(dh, theta, pair)
    presenter.chart(P.rope_pair_figure(traj, pos, th_i, lang), width="stretch")
    st.caption(R.pair_caption(dh, pair, pos, th_i, lang))
    ui.badge("formula")


def _relative_tab(theta: float, lang: str) -> None:
    st.markdown(ui.t("positions.relative_intro"))
    demo = R.relative_demo(64, theta)
    presenter.chart(P.rope_offset_figure(demo["table"], demo["offsets"], demo["shifts"], lang), width="stretch")
    st.table(R.offset_pairs_table(demo["q"], demo["k"], theta).style.format({"q·k": "{:.6f}"}), hide_index=True)
    ui.badge("formula")


def _real_tab(loaded) -> None:
    st.markdown(ui.t("positions.real_intro"))
    tr = ui.current_trace()
    if tr is None or loaded is None:
        return
    if not R.rope_checkable(loaded):
        return st.info(ui.t("positions.not_rope", kind=loaded.facts.position_type))
    layer = widgets.layer_slider("positions_layer", tr.n_layers)
    try:
        chk = cache.rope_check(ui.model_spec(), ui.prompt(), ui.chat(), layer)
    except (ValueError, AttributeError) as e:
        return st.info(ui.t("positions.not_rope", kind=widgets.md(e)))
    d = ui.layer_detail(tr, layer)
    if d is None:
        return
    gaps = R.rope_check_readout(chk, d.q)
    m1, m2 = st.columns(2)
    m1.metric(ui.t("positions.diff_rot"), gaps["rotated"])
    m2.metric(ui.t("positions.diff_raw"), gaps["raw"])
    ui.badge("model")
    ui.download_trace("positions")


def render() -> None:
    ui.header("page.positions", "positions.intro")
    lang, loaded = ui.lang(), ui.loaded_model()
    theta, dh = R.rope_params(loaded.facts if loaded is not None else None)
    tabs = st.tabs([ui.t(f"positions.tab_{k}") for k in ("sin", "kinds", "rope", "relative", "real")])
    with tabs[0]:
        _sin_tab(lang)
    with tabs[1]:
        _kinds_tab(loaded, lang)
    with tabs[2]:
        _rope_tab(theta, dh, lang)
    with tabs[3]:
        _relative_tab(theta, lang)
    with tabs[4]:
        _real_tab(loaded)


render()
presenter.sources("positions")
