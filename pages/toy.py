"""Toy transformer: the same parts as SmolLM2, small enough to show every intermediate value."""

from __future__ import annotations

import streamlit as st

from core.engine.tokens import NOTE_NO_TEMPLATE
from core.engine.types import TOY_ID
from core.plot import attnview
from core.toy import figures as toy_fig
from core.web import cache, live, page, presenter, ui, widgets


def _site(tr, stage: str, layer: int, head: int, lang: str, start: int) -> None:
    """One site's heatmap, its shape and range, and the provenance badge."""
    presenter.chart(toy_fig.fig_site(tr, stage, layer, head, lang, start), width="stretch")
    st.caption(toy_fig.site_caption(tr, stage, layer, head, lang))
    ui.badge("toy")


def _config_section(loaded, lang: str) -> None:
    st.header(ui.t("toy.sec_config"))
    real = cache.real_facts()
    presenter.frame(toy_fig.facts_table(loaded.facts.to_dict(), real, lang), hide_index=True, width="stretch", height=610)
    st.caption(ui.t("toy.config_caption") if real else ui.t("toy.real_missing"))
    ui.badge("toy", "SmolLM2: " + ui.t("badge.real") if real else None)


def _trace_problem(err: str) -> None:
    """No trace: a hint (an i18n key such as hint.empty_prompt) or an error message."""
    if err.startswith("hint."):
        st.info(ui.t(err))
    else:
        st.error(ui.t("toy.trace_error", msg=widgets.md(err)))


def _sites_section(lang: str) -> None:
    st.header(ui.t("toy.sec_sites"))
    tr, err = cache.toy_trace(ui.prompt(), ui.chat())
    if tr is None:
        return _trace_problem(err)
    if tr.truncated_from:
        ui.warn_cut(tr.truncated_from, tr.n_tokens, tr.meta.get("cut_by"), bool(tr.meta.get("kept_tail")))
    st.caption(ui.t("toy.sites_caption", n=tr.n_tokens))
    layer, head = widgets.layer_head_pickers("toy", tr.n_layers, tr.n_heads)
    start, hi = 0, tr.n_tokens - attnview.CELLS
    if hi > 0:  # a long prompt: both heatmaps show the exact values of a 64-position window
        start = widgets.int_slider(ui.t("attnview.start"), 0, hi, ui.qp_int("twin", 0, 0, hi), key="toy_win")
        ui.set_qp(twin=start)
    c1, c2 = st.columns(2)
    a_stage = c1.selectbox(ui.t("toy.attn_stage"), toy_fig.ATTN_STAGES, index=4, format_func=ui.fmt("toy.stage.{}"), placeholder=ui.t("ui.choose"), key="toy_attn_stage")
    mlp_stages = toy_fig.mlp_stages(tr)
    m_stage = c2.selectbox(ui.t("toy.mlp_stage"), mlp_stages, index=len(mlp_stages) - 2, format_func=ui.fmt("toy.stage.{}"), placeholder=ui.t("ui.choose"), key="toy_mlp_stage")
    with c1:
        _site(tr, a_stage, layer, head, lang, start)
    with c2:
        _site(tr, m_stage, layer, head, lang, start)
    st.caption(toy_fig.row_check_caption(tr, layer, head, lang))
    if NOTE_NO_TEMPLATE in tr.notes:  # (the truncation note is the warning above)
        st.caption(ui.t("toy.note_no_template"))
    if ui.is_toy():
        ui.download_trace(tr, "toy")


def _order_section(lang: str) -> None:
    st.header(ui.t("toy.sec_order"))
    st.markdown(ui.t("toy.order_caption"))
    c1, c2 = st.columns(2)
    a = c1.text_input(ui.t("toy.order_a"), "我喜欢你", max_chars=60, key="toy_order_a")
    b = c2.text_input(ui.t("toy.order_b"), "你喜欢我", max_chars=60, key="toy_order_b")
    try:
        rows = cache.word_order(a, b)
    except ValueError:
        st.warning(ui.t("toy.order_bad"))
    else:
        presenter.frame(toy_fig.word_order_table(rows, lang), hide_index=True, width="stretch")  # st.table on a projector
        presenter.chart(toy_fig.fig_word_order(rows, lang), width="stretch")
        ui.badge("toy")


def _train_section(lang: str) -> None:
    st.header(ui.t("toy.sec_train"))
    curve = cache.shipped_curve()
    st.markdown(toy_fig.train_caption(curve, live.LIVE_SECONDS, lang))
    st.caption(toy_fig.report_text(curve["report"], lang))
    c1, c2, c3 = st.columns([2, 1, 1])
    steps = c1.slider(ui.t("toy.train_steps"), 50, 800, live.LIVE_STEPS, 50, key="toy_train_steps")
    seed = c2.number_input(ui.t("toy.train_seed"), 0, 9999, 0, key="toy_train_seed")
    go = c3.button(ui.t("toy.train_button"), key="toy_train_go", type="primary")
    bar, c_loss, c_pat = st.empty(), *st.columns(2)
    loss_slot, pat_slot = c_loss.empty(), c_pat.empty()
    if go:
        st.session_state["toy_live"] = live.run_live(int(steps), int(seed), bar, loss_slot, pat_slot, lang)
    elif "toy_live" not in st.session_state:
        presenter.chart_in(loss_slot, toy_fig.fig_loss(curve["loss"], lang), width="stretch")
    result = st.session_state.get("toy_live")
    if result:
        if not go:
            presenter.chart_in(loss_slot, toy_fig.fig_live_loss(result["losses"], curve["loss"], lang), width="stretch")
        level, text = toy_fig.live_note(result, curve, lang)  # cut short by the time budget → a warning, not a success
        getattr(st, level)(text)
    ui.badge("measured")


def render() -> None:
    lang = ui.lang()
    try:
        loaded = cache.get_model(TOY_ID)
    except Exception as e:  # e.g. assets/toy/ missing: say so, never a traceback
        return st.error(ui.t("err.model_load", msg=ui.load_error_text(e, TOY_ID)))
    _config_section(loaded, lang)
    _sites_section(lang)
    _order_section(lang)
    _train_section(lang)


page.run(render)
