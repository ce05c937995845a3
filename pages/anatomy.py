"""Model anatomy: the config checklist, the parameter breakdown, one block, and any pasted config.json."""

import streamlit as st

from core.engine.types import ConfigError
from core.stream import anatomy
from core.stream import figures as ps
from core.web import cache, page, presenter, ui, widgets

KEY = "anatomy_json"


def _load_preset(cfg: dict) -> None:
    st.session_state[KEY] = anatomy.config_text(cfg)


def _checklist(loaded, live_cfg: dict, lang: str) -> None:
    st.header(ui.t("anatomy.h_checklist", name=widgets.md(loaded.facts.name)))
    try:
        st.table(anatomy.checklist_table(anatomy.analyse_config(live_cfg), lang))  # a static table wraps the long explanations
    except ConfigError as e:
        widgets.config_error(e)
    ui.badge("model")


def _params(loaded, lang: str) -> None:
    st.header(ui.t("anatomy.h_params"))
    parts = cache.get_breakdown(loaded)
    presenter.chart(ps.fig_params(parts, lang), width="stretch")
    key, kw = anatomy.breakdown_note(parts, loaded.facts.n_params, loaded.facts.tied_embeddings)  # this model's own head
    (st.warning if key == "anatomy.sum_bad" else st.success)(ui.t(key, **kw))
    ui.badge("model")


def _block(loaded, lang: str) -> None:
    st.header(ui.t("anatomy.h_block"))
    rows = anatomy.block_rows(loaded.model)
    try:
        st.code(anatomy.first_block_text(loaded.model), language="text")
    except Exception as e:  # the toy or an odd architecture: the table below still holds
        st.info(widgets.md(e))
    presenter.frame(anatomy.block_table_view(anatomy.block_table(rows, lang), lang), hide_index=True, width="stretch")
    st.caption(ui.t("anatomy.block_total", **anatomy.block_args(rows, loaded.facts.n_layers, loaded.facts.n_params)))
    ui.badge("model")


def _paste(live_cfg: dict, lang: str) -> None:
    st.header(ui.t("anatomy.h_paste"))
    if KEY not in st.session_state:
        _load_preset(anatomy.QWEN25_05B_CONFIG)
    b1, b2 = st.columns(2)
    b1.button(ui.t("anatomy.preset_qwen"), on_click=_load_preset, args=(anatomy.QWEN25_05B_CONFIG,), key="anatomy_qwen")
    b2.button(ui.t("anatomy.preset_current"), on_click=_load_preset, args=(live_cfg,), key="anatomy_current")
    text = st.text_area(ui.t("anatomy.paste"), key=KEY, height=260)
    try:
        report = anatomy.analyse_config(anatomy.parse_config(text))
    except ConfigError as e:
        widgets.config_error(e)
        return
    _estimate(report, lang)


def _estimate(report: anatomy.ConfigReport, lang: str) -> None:
    st.table(anatomy.checklist_table(report, lang))
    est = anatomy.estimate_config(report)
    kw = est.args()
    st.markdown(ui.t("anatomy.estimate", **kw))
    if est.published is not None:
        st.caption(ui.t("anatomy.estimate_known", **kw))
    if report.n_experts:
        st.warning(ui.t("anatomy.moe_note"))
    # its own key: for the loaded model's config this figure equals the breakdown's (same auto-generated ID)
    presenter.chart(ps.fig_params(est.parts, lang), width="stretch", key="anatomy_fig_estimate")
    st.info(ui.t("anatomy.kv", **kw))
    ui.badge("formula")


def render(loaded) -> None:
    lang, live_cfg = ui.lang(), anatomy.config_of(loaded)
    _checklist(loaded, live_cfg, lang)
    _params(loaded, lang)
    _block(loaded, lang)
    _paste(live_cfg, lang)


page.run(render)
