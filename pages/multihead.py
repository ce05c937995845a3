"""Multi-head attention: d_model split into heads, per-head outputs, concat, W_O; MHA vs GQA vs
MQA (who shares which KV head) and what each costs in KV-cache bytes."""

from __future__ import annotations

import streamlit as st

from core.engine.types import HeadGeometry
from core.maths import attention as A
from core.maths import figures as P
from core.plot import attnview
from core.web import cache, contents, page, presenter, ui, widgets


def _split_section(cfg: HeadGeometry, lang: str) -> None:
    """Pick a length; the model's shapes through one attention sub-layer."""
    contents.section("multihead.split_title")
    T = st.slider(ui.t("multihead.T"), 1, 64, 8, key="multihead_T")
    st.markdown(ui.t("multihead.split", d=cfg.d_model, h=cfg.n_heads, dh=cfg.dh, hd=cfg.n_heads * cfg.dh))
    st.table(A.multihead_shapes_table(cfg, T, lang), hide_index=True)
    ui.badge("formula")


def _sharing_section(configs: list[HeadGeometry], lang: str) -> HeadGeometry:
    """The page's picture first: pick a model and a number of KV heads, see who shares which K and V. Returns the model."""
    contents.section("multihead.sharing_title", anchor="sharing")
    c1, c2 = st.columns(2)
    cfg = configs[c1.selectbox(ui.t("multihead.model"), range(len(configs)), format_func=lambda i: configs[i].name,
                               placeholder=ui.t("ui.choose"), key="multihead_model")]
    hkv = c2.select_slider(ui.t("multihead.hkv"), A.divisors(cfg.n_heads), value=cfg.n_kv_heads,
                           key=f"multihead_hkv_{cfg.n_heads}")
    shared = cfg.with_kv_heads(hkv)
    presenter.chart(P.kv_sharing_figure(cfg.n_heads, hkv, lang), width="stretch", key="multihead_fig_sharing")
    st.caption(ui.t("multihead.sharing_caption", kind=shared.kind, g=shared.group_size, own=cfg.n_kv_heads))
    st.markdown(ui.t("multihead.sharing_intro"))
    ui.badge("formula")
    return cfg


def _bytes_section(configs: list[HeadGeometry], lang: str) -> None:
    contents.section("multihead.bytes_title")
    st.markdown(ui.t("multihead.bytes_intro"))
    b1, b2 = st.columns(2)
    n = b1.number_input(ui.t("multihead.n_tokens"), 1, 1_000_000, 4096, step=1024, key="multihead_n")
    bpv = b2.selectbox(ui.t("multihead.bpv"), list(A.BYTE_WIDTHS), format_func=A.bytes_label, placeholder=ui.t("ui.choose"), key="multihead_bpv",
                       help=ui.t("kv.default_note"))  # float32 first: the tour's, the KV page's and the stepper's bytes
    st.table(A.kv_table_view(A.kv_table(configs, int(n), bpv, lang)), hide_index=True)  # every column whole
    presenter.chart(P.kv_bytes_figure(configs, int(n), bpv, lang), width="stretch")
    ui.badge("formula")


def _real_section(lang: str) -> None:
    contents.section("multihead.real_title")
    st.markdown(ui.t("multihead.real_intro"))
    tr = ui.current_trace()
    if tr is None:
        return
    layer = widgets.layer_slider("multihead_layer", tr.n_layers)
    try:
        parts = cache.recombine(tr, layer)
    except (ValueError, AttributeError) as e:
        return st.info(ui.t("multihead.no_o_proj", msg=widgets.md(e)))
    r = A.recombine_readout(parts)
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("multihead.per_head"), r["per_head"])
    m2.metric(ui.t("multihead.concat"), r["concat"])
    m3.metric(ui.t("multihead.diff"), r["diff"])
    norms = A.head_write_norms(parts["per_head"])  # [H, T]: how much each head writes at each position
    view = attnview.strip(norms, widgets.map_window("multihead", tr.n_tokens, kind="strip"), how="mean")  # ≤ 64 columns
    presenter.chart(P.matrix_figure(view.z, ui.t("multihead.fig_norms", l=layer), A.head_labels(tr.n_heads),
                                    attnview.cell_labels(view, tr.tokens), lang, xlabel_key="ui.position", ylabel_key="ui.head",
                                    note=attnview.note(view, lang)), width="stretch")
    st.caption(ui.t("multihead.diff_note"))
    ui.badge("model")
    ui.download_trace(tr, "multihead")


def render() -> None:
    lang, loaded = ui.lang(), ui.loaded_model()
    configs = A.head_configs(loaded.facts.geometry if loaded is not None else None)  # the loaded model first
    cfg = _sharing_section(configs, lang)
    _split_section(cfg, lang)
    _bytes_section(configs, lang)
    _real_section(lang)


page.run(render)
