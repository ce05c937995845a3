"""Attention heads: a layer's heads (or one head across layers) as small maps, one query's weights,
and a head atlas (entropy, previous-token score, first-token sink) to jump to a head."""

from __future__ import annotations

import streamlit as st

from core.inside import figures as inside_fig
from core.inside import heads
from core.web import cache, presenter, ui, widgets


def _jump(layer: int, head: int) -> None:
    """Button callback: put the head in the URL and let the sliders re-read it."""
    ui.set_qp(layer=layer, head=head)
    for k in ("heads_layer", "heads_head"):
        st.session_state.pop(k, None)


def _grid(tr, layer: int, head: int, lang: str) -> bool:
    """The small maps; returns whether the first-token column is hidden."""
    c1, c2 = st.columns(2)
    mode = c1.radio(ui.t("heads.mode"), ["layer", "head"], format_func=ui.fmt("heads.mode_{}", l=layer, h=head),
                    horizontal=True, key="heads_mode")
    hide = c2.toggle(ui.t("heads.hide_first"), key="heads_hide", help=ui.t("heads.hide_help"))
    g = heads.head_grid(tr.attn_pattern, mode, layer, head, tr.kv_head_of, hide)
    st.plotly_chart(inside_fig.fig_head_grid(g.maps, g.titles, tr.tokens, lang, g.cols), width="stretch")
    if g.clipped:
        st.caption(ui.t("heads.window_note", n=g.end, T=g.n_tokens))
    st.caption(ui.t("heads.gqa_note", **heads.gqa_args(tr.n_heads, tr.n_kv_heads)))
    ui.badge("model", ui.t("heads.hidden_badge") if hide else None)
    return hide


def _query(tr, layer: int, head: int, hide: bool, lang: str) -> None:
    T = tr.n_tokens
    st.subheader(ui.t("heads.query_title", l=layer, h=head))
    q = widgets.int_slider(ui.t("heads.query_pick"), 0, T - 1, ui.qp_int("pos", T - 1, 0, T - 1), key="heads_q")
    ui.set_qp(pos=q)
    st.plotly_chart(inside_fig.fig_query_bars(heads.query_row(tr.attn_pattern, layer, head, q, hide), tr.tokens, q, lang), width="stretch")
    ui.badge("model", ui.t("heads.hidden_badge") if hide else None)


def _atlas(tr, layer: int, head: int, lang: str) -> None:
    st.subheader(ui.t("heads.atlas_title"))
    st.markdown(ui.t("heads.atlas_intro"))
    atlas = cache.atlas(ui.model_spec(), tr.prompt, tr.chat)
    metric = st.radio(ui.t("heads.metric"), heads.METRICS, format_func=ui.fmt("heads.metric_{}"), horizontal=True, key="heads_metric")
    st.plotly_chart(inside_fig.fig_atlas(getattr(atlas, metric), ui.t(f"heads.metric_{metric}"), ui.t(f"heads.unit_{metric}"), lang,
                                         (layer, head)), width="stretch")
    ui.badge("model", ui.t("heads.atlas_badge"))
    c1, c2 = st.columns([3, 1])
    pick = c1.selectbox(ui.t("heads.jump"), heads.best_heads(atlas, metric), format_func=heads.head_label, key="heads_jump_pick")
    c2.button(ui.t("heads.jump_btn"), on_click=_jump, args=(pick[0], pick[1]), key="heads_jump_btn")


def render() -> None:
    ui.header("page.heads", "heads.intro")
    tr = ui.current_trace()
    if tr is None:
        return
    lang = ui.lang()
    layer, head = widgets.layer_head_pickers("heads", tr.n_layers, tr.n_heads)
    hide = _grid(tr, layer, head, lang)
    _query(tr, layer, head, hide, lang)
    _atlas(tr, layer, head, lang)
    ui.download_trace("heads")


render()
presenter.sources("attention")
