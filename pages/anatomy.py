"""Model anatomy: the config checklist, the parameter breakdown, one block, and any pasted config.json."""

import pandas as pd
import streamlit as st

from core.engine import roles
from core.engine.numbers import human_bytes
from core.engine.types import ConfigError
from core.stream import anatomy
from core.stream import figures as ps
from core.web import cache, presenter, ui

KEY = "anatomy_json"


def _checklist(report: anatomy.ConfigReport) -> pd.DataFrame:
    t = ui.t
    return pd.DataFrame([{t("anatomy.col_item"): k, t("anatomy.col_value"): v, t("anatomy.col_meaning"): t(f"anatomy.ck_{k}")}
                         for k, v in report.checklist()]).set_index(t("anatomy.col_item"))


def _load_preset(cfg: dict) -> None:
    st.session_state[KEY] = anatomy.config_text(cfg)


def render() -> None:
    ui.header("page.anatomy", "anatomy.intro")
    loaded = ui.loaded_model()
    if loaded is None:
        return
    lang, t, spec = ui.lang(), ui.t, ui.model_spec()
    live_cfg = anatomy.config_of(loaded)

    st.subheader(t("anatomy.h_checklist", name=loaded.facts.name))
    try:
        st.table(_checklist(anatomy.analyse_config(live_cfg)))  # a static table wraps the long explanations
    except ConfigError as e:
        ui.config_error(e)
    ui.badge("model")

    st.subheader(t("anatomy.h_params"))
    parts = cache.get_breakdown(spec)
    st.plotly_chart(ps.fig_params(parts, lang), width="stretch")
    total = loaded.facts.n_params
    if sum(parts.values()) == total:
        st.success(t("anatomy.sum_ok", total=f"{total:,}"))
    else:
        st.warning(t("anatomy.sum_bad", parts=f"{sum(parts.values()):,}", total=f"{total:,}"))
    ui.badge("model")

    st.subheader(t("anatomy.h_block"))
    prefix = anatomy.first_block_prefix(loaded.model)
    rows = anatomy.param_table(loaded.model, prefix)
    try:
        st.code(str(roles.find_sites(loaded.model).blocks[0]), language="text")
    except Exception as e:  # the toy or an odd architecture: the table below still holds
        st.info(str(e))
    st.dataframe(pd.DataFrame([{t("anatomy.col_name"): r["name"], t("anatomy.col_shape"): str(r["shape"]),
                                   t("anatomy.col_params"): r["params"], t("anatomy.col_role"): t(f"anatomy.role_{r['role']}")}
                                  for r in rows]), hide_index=True, width="stretch")
    n_block, L = sum(r["params"] for r in rows), loaded.facts.n_layers
    st.caption(t("anatomy.block_total", n=f"{n_block:,}", L=L, all=f"{n_block * L:,}", share=f"{n_block * L / total:.1%}"))
    ui.badge("model")

    st.subheader(t("anatomy.h_paste"))
    if KEY not in st.session_state:
        _load_preset(anatomy.QWEN25_05B_CONFIG)
    b1, b2 = st.columns(2)
    b1.button(t("anatomy.preset_qwen"), on_click=_load_preset, args=(anatomy.QWEN25_05B_CONFIG,), key="anatomy_qwen")
    b2.button(t("anatomy.preset_current"), on_click=_load_preset, args=(live_cfg,), key="anatomy_current")
    text = st.text_area(t("anatomy.paste"), key=KEY, height=260)
    try:
        report = anatomy.analyse_config(anatomy.parse_config(text))
    except ConfigError as e:
        ui.config_error(e)
        return
    st.table(_checklist(report))
    est = anatomy.estimate_params(report)
    n_est = sum(est.values())
    st.markdown(t("anatomy.estimate", total=f"{n_est:,}"))
    if report.model_type == "qwen2" and report.hidden_size == 896 and report.num_hidden_layers == 24:
        st.caption(t("anatomy.estimate_known", known=f"{anatomy.QWEN25_05B_PARAMS:,}", diff=f"{n_est - anatomy.QWEN25_05B_PARAMS:+,}"))
    if report.n_experts:
        st.warning(t("anatomy.moe_note"))
    st.plotly_chart(ps.fig_params(est, lang), width="stretch")
    ctx = min(report.max_position_embeddings or 4096, 32768)
    st.info(t("anatomy.kv", bf16=human_bytes(report.kv_bytes_per_token(2)), fp32=human_bytes(report.kv_bytes_per_token(4)),
              ctx=human_bytes(report.kv_bytes_per_token(2) * ctx), n=f"{ctx:,}"))
    ui.badge("formula")


render()
presenter.sources("model")
