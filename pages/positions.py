"""Positions: the sinusoidal encoding, a learned table (and its last row), RoPE as rotating 2-D pairs,
the relative-offset property, ALiBi's per-head linear bias, the four side by side, and RoPE
reproducing the real model's queries."""

from __future__ import annotations

import streamlit as st

from core.maths import figures as P
from core.maths import positions as R
from core.web import cache, nav, page, presenter, ui, widgets


def _sin_tab(lang: str) -> None:
    picture = st.container()  # the picture first, on the first screen; its sizes and the formula under it
    c1, c2 = st.columns(2)
    T = c1.slider(ui.t("positions.T"), 8, 256, 64, key="positions_T")
    d = c2.slider(ui.t("positions.d"), 8, 256, 128, step=2, key="positions_d")
    pe = R.sinusoidal(T, d)
    presenter.chart_in(picture, P.sinusoidal_figure(pe, lang), width="stretch", key="positions_fig_sin")
    st.markdown(ui.t("positions.sin_intro"))
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


def _learned_tab(lang: str) -> None:
    st.markdown(ui.t("positions.learned_intro"))
    c1, c2 = st.columns(2)
    P_rows = c1.slider(ui.t("positions.learned_rows"), 8, 64, 16, key="positions_learned_rows")
    start = widgets.int_slider(ui.t("positions.learned_start"), 0, P_rows + 4, 6, key="positions_learned_start", where=c2)
    model = R.learned_toy(P_rows)
    table = R.learned_table(model)
    presenter.chart(P.learned_table_figure(table, start, start + R.LEARNED_READ, lang), width="stretch", key="positions_fig_learned")
    same = R.learned_read(model, start)
    last = start + R.LEARNED_READ - 1
    if same is None:
        st.error(ui.t("positions.learned_refused", s=start, e=last, p=P_rows, last=P_rows - 1))
    else:
        st.caption(ui.t("positions.learned_read", s=start, e=last, same=ui.t("positions.yes" if same else "positions.no")))
    st.markdown(ui.t("positions.learned_after", n=f"{R.gpt2_positions():,}"))
    ui.badge("toy", ui.t("norms.untrained"))


def _alibi_tab(lang: str) -> None:
    st.markdown(ui.t("positions.alibi_intro"))
    c1, c2, c3 = st.columns(3)
    H = c1.slider(ui.t("positions.alibi_heads"), 1, 16, R.ALIBI_HEADS, key="positions_alibi_heads")
    T = c2.slider(ui.t("positions.T"), 4, 16, 8, key="positions_alibi_T")
    head = widgets.int_slider(ui.t("ui.head"), 0, H - 1, 0, key="positions_alibi_head", where=c3)
    flat = st.toggle(ui.t("positions.alibi_flat"), False, key="positions_alibi_flat")
    demo = R.alibi_demo(H, T, flat)
    presenter.chart(P.alibi_slopes_figure(demo.slopes, lang), width="stretch", key="positions_fig_slopes")
    with st.expander(ui.t("positions.alibi_table")):
        st.table(R.alibi_slopes_table(demo.slopes), hide_index=True)
    labels = [str(i) for i in range(T)]
    hidden = R.future_keys(T)
    presenter.chart(P.matrix_figure(demo.bias[head], ui.t("positions.fig_bias", h=head, m=f"{demo.slopes[head]:.4g}"), labels,
                                    labels, lang), width="stretch", key="positions_fig_bias")
    a, b = st.columns(2)
    presenter.chart_in(a, P.weights_figure(demo.plain, hidden, ui.t("positions.fig_plain"), labels, labels, lang, across=2),
                       width="stretch", key="positions_fig_plain")
    presenter.chart_in(b, P.weights_figure(demo.weights[head], hidden, ui.t("positions.fig_alibi", h=head), labels, labels, lang,
                                           across=2),
                       width="stretch", key="positions_fig_alibi")
    st.caption(ui.t("positions.alibi_readout", **R.alibi_readout(demo, head)))
    st.markdown(ui.t("positions.alibi_after"))
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
        chk = cache.rope_check(tr, layer)
    except (ValueError, AttributeError) as e:
        return st.info(ui.t("positions.not_rope", kind=widgets.md(e)))
    q = ui.site(tr, "q", layer)
    if q is None:
        return
    gaps = R.rope_check_readout(chk, q)
    m1, m2 = st.columns(2)
    m1.metric(ui.t("positions.diff_rot"), gaps["rotated"])
    m2.metric(ui.t("positions.diff_raw"), gaps["raw"])
    ui.badge("model")
    ui.download_trace(tr, "positions")


def render() -> None:
    lang, loaded = ui.lang(), ui.loaded_model()
    theta, dh = R.rope_params(loaded.facts if loaded is not None else None)
    keys = ("sin", "learned", "rope", "relative", "alibi", "kinds", "real")
    tabs = widgets.tabs_url(keys, [ui.t(f"positions.tab_{k}") for k in keys], key="positions_tab")  # a link opens one (?tab=rope)
    with tabs[0]:
        _sin_tab(lang)
    with tabs[1]:
        _learned_tab(lang)
    with tabs[2]:
        _rope_tab(theta, dh, lang)
    with tabs[3]:
        _relative_tab(theta, lang)
    with tabs[4]:
        _alibi_tab(lang)
    with tabs[5]:
        _kinds_tab(loaded, lang)
    with tabs[6]:
        _real_tab(loaded)


page.run(render)
