"""Attention heads: a layer's heads (or one head across layers) as small maps, one query's weights,
and a head atlas (entropy, previous-token score, first-token sink) to jump to a head."""

from __future__ import annotations

import math

import streamlit as st

from core.inside import figures as inside_fig
from core.inside import heads
from core.web import cache, presenter, ui

GRID_TOKENS = 48  # positions drawn per small map (the single-query view shows all)
METRICS = ("prev_token", "first_token", "entropy", "max_weight")


def _jump(layer: int, head: int) -> None:
    """Button callback: put the head in the URL and let the sliders re-read it."""
    ui.set_qp(layer=layer, head=head)
    for k in ("heads_layer", "heads_head"):
        st.session_state.pop(k, None)


def render() -> None:
    ui.header("page.heads", "heads.intro")
    tr = ui.current_trace()
    if tr is None:
        return
    lang, (L, H, T) = ui.lang(), (tr.n_layers, tr.n_heads, tr.n_tokens)
    layer, head = ui.layer_head_pickers("heads", L, H)
    c1, c2 = st.columns(2)
    mode = c1.radio(ui.t("heads.mode"), ["layer", "head"], format_func=ui.fmt("heads.mode_{}", l=layer, h=head),
                    horizontal=True, key="heads_mode")
    hide = c2.toggle(ui.t("heads.hide_first"), key="heads_hide", help=ui.t("heads.hide_help"))

    s, e = heads.window(T, GRID_TOKENS)
    if mode == "layer":
        maps = tr.attn_pattern[layer, :, s:e, s:e]  # [H, T', T']
        titles = [f"h{h} · KV{tr.kv_head_of(h)}" for h in range(H)]
    else:
        maps = tr.attn_pattern[:, head, s:e, s:e]  # [L, T', T']
        titles = [f"L{i}" for i in range(L)]
    maps = heads.drop_first_key(maps) if hide else maps.astype(float)
    cols = max(1, math.ceil(math.sqrt(maps.shape[0])))
    st.plotly_chart(inside_fig.fig_head_grid(maps, titles, tr.tokens, lang, cols), width="stretch")
    if e < T:
        st.caption(ui.t("heads.window_note", n=e, T=T))
    st.caption(ui.t("heads.gqa_note", H=H, Hkv=tr.n_kv_heads, g=H // tr.n_kv_heads))
    ui.badge("model", ui.t("heads.hidden_badge") if hide else None)

    st.subheader(ui.t("heads.query_title", l=layer, h=head))
    q = st.slider(ui.t("heads.query_pick"), 0, T - 1, ui.qp_int("pos", T - 1, 0, T - 1), key="heads_q")
    ui.set_qp(pos=q)
    full = tr.attn_pattern[layer, head]  # [T, T]
    row = (heads.drop_first_key(full) if hide else full.astype(float))[q]
    st.plotly_chart(inside_fig.fig_query_bars(row, tr.tokens, q, lang), width="stretch")
    ui.badge("model", ui.t("heads.hidden_badge") if hide else None)

    st.subheader(ui.t("heads.atlas_title"))
    st.markdown(ui.t("heads.atlas_intro"))
    atlas = cache.atlas(ui.model_spec(), tr.prompt, tr.chat)
    metric = st.radio(ui.t("heads.metric"), METRICS, format_func=ui.fmt("heads.metric_{}"), horizontal=True, key="heads_metric")
    values = getattr(atlas, metric)
    st.plotly_chart(inside_fig.fig_atlas(values, ui.t(f"heads.metric_{metric}"), ui.t(f"heads.unit_{metric}"), lang, (layer, head)),
                    width="stretch")
    ui.badge("model", ui.t("heads.atlas_badge"))
    best = heads.top_heads(values, 10, largest=(metric != "entropy"))
    c1, c2 = st.columns([3, 1])
    pick = c1.selectbox(ui.t("heads.jump"), best, format_func=lambda x: f"L{x[0]} · h{x[1]} — {x[2]:.3f}", key="heads_jump_pick")
    c2.button(ui.t("heads.jump_btn"), on_click=_jump, args=(pick[0], pick[1]), key="heads_jump_btn")
    ui.download_trace("heads")


render()
presenter.sources("attention")
