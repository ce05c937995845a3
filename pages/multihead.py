"""Multi-head attention: d_model split into heads, per-head outputs, concat, W_O; MHA vs GQA vs
MQA (who shares which KV head) and what each costs in KV-cache bytes."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.engine.tokens import position_label
from core.engine.types import HeadGeometry
from core.maths import attention as A
from core.maths import figures as P
from core.web import cache, presenter, ui

BYTES = {2: "fp16 / bf16", 4: "fp32", 1: "int8"}


def _configs() -> list[HeadGeometry]:
    """The loaded model first (when it loads), then the tutorials' models."""
    loaded = ui.loaded_model()
    own = [loaded.facts.geometry] if loaded is not None else []
    return own + [c for c in A.HEAD_CONFIGS if not own or c.name.split()[0] not in own[0].name]


def render() -> None:
    ui.header("page.multihead", "multihead.intro")
    lang, configs = ui.lang(), _configs()
    c1, c2 = st.columns(2)
    cfg = configs[c1.selectbox(ui.t("multihead.model"), range(len(configs)), format_func=lambda i: configs[i].name,
                               key="multihead_model")]
    T = c2.slider(ui.t("multihead.T"), 1, 64, 8, key="multihead_T")
    st.markdown(ui.t("multihead.split", d=cfg.d_model, h=cfg.n_heads, dh=cfg.dh, hd=cfg.n_heads * cfg.dh))
    shapes = pd.DataFrame(A.multihead_shapes(cfg, T), columns=[ui.t("multihead.stage"), ui.t("ui.shape")])
    st.dataframe(shapes, hide_index=True, width="stretch")
    ui.badge("formula")

    st.subheader(ui.t("multihead.sharing_title"))
    st.markdown(ui.t("multihead.sharing_intro"))
    hkv = st.select_slider(ui.t("multihead.hkv"), A.divisors(cfg.n_heads), value=cfg.n_kv_heads,
                           key=f"multihead_hkv_{cfg.n_heads}")
    kind = "MHA" if hkv == cfg.n_heads else ("MQA" if hkv == 1 else "GQA")
    st.plotly_chart(P.kv_sharing_figure(cfg.n_heads, hkv, lang), width="stretch")
    st.caption(ui.t("multihead.sharing_caption", kind=kind, g=cfg.n_heads // hkv, own=cfg.n_kv_heads))
    ui.badge("formula")

    st.subheader(ui.t("multihead.bytes_title"))
    st.markdown(ui.t("multihead.bytes_intro"))
    b1, b2 = st.columns(2)
    n = b1.number_input(ui.t("multihead.n_tokens"), 1, 1_000_000, 4096, step=1024, key="multihead_n")
    bpv = b2.selectbox(ui.t("multihead.bpv"), list(BYTES), format_func=lambda b: f"{b} B · {BYTES[b]}", key="multihead_bpv")
    st.dataframe(A.kv_table(configs, int(n), bpv, lang), hide_index=True, width="stretch")
    st.plotly_chart(P.kv_bytes_figure(configs, int(n), bpv, lang), width="stretch")
    ui.badge("formula")

    st.subheader(ui.t("multihead.real_title"))
    st.markdown(ui.t("multihead.real_intro"))
    tr = ui.current_trace()
    if tr is None:
        return
    layer = ui.layer_slider("multihead_layer", tr.n_layers)
    try:
        parts = cache.recombine(ui.model_spec(), ui.prompt(), ui.chat(), layer)
    except (ValueError, AttributeError) as e:
        st.info(ui.t("multihead.no_o_proj", msg=str(e)))
        return
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("multihead.per_head"), str(list(parts["per_head"].shape)))
    m2.metric(ui.t("multihead.concat"), str(list(parts["concat"].shape)))
    m3.metric(ui.t("multihead.diff"), f"{float(parts['max_diff']):.2e}")
    norms = (parts["per_head"] ** 2).sum(-1) ** 0.5  # [H, T]: how much each head writes at each position
    labels = [position_label(tr.tokens, i) for i in range(tr.n_tokens)]
    st.plotly_chart(P.matrix_figure(norms, ui.t("multihead.fig_norms", l=layer), [f"h{h}" for h in range(tr.n_heads)], labels,
                                    lang, xlabel_key="ui.position", ylabel_key="ui.head"), width="stretch")
    st.caption(ui.t("multihead.diff_note"))
    ui.badge("model")
    ui.download_trace("multihead")


render()
presenter.sources("multihead")
