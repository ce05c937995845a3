"""Attention heads: a layer's heads (or one head across layers) as small maps, one query's weights,
and a head atlas (entropy, previous-token score, first-token sink) to jump to a head."""

from __future__ import annotations

import streamlit as st

from core.inside import figures as inside_fig
from core.inside import heads
from core.learn import examples
from core.web import cache, contents, page, presenter, ui, widgets


def _jump(layer: int, head: int) -> None:
    """Button callback: move the sliders to the head (the browser shows it too) and the URL with them."""
    ui.set_qp(layer=layer, head=head)
    widgets.put("heads_layer", layer)
    widgets.put("heads_head", head)


def _grid(tr, layer: int, head: int, lang: str) -> bool:
    """The small maps; returns whether the first-token column is hidden."""
    c1, c2 = st.columns(2)
    mode = widgets.radio_url(ui.t("heads.mode"), ["layer", "head"], "layer", format_func=ui.fmt("heads.mode_{}", l=layer, h=head),
                             horizontal=True, key="heads_mode", param="show", where=c1)
    hide = widgets.toggle_url(ui.t("heads.hide_first"), False, key="heads_hide", param="hide", where=c2, help=ui.t("heads.hide_help"))
    start = widgets.map_window("heads", tr.n_tokens)
    if mode == "layer":
        w = ui.site(tr, "attn_pattern", layer)
        if w is None:
            return hide
        g = heads.head_grid(w, heads.layer_titles(tr.n_heads, tr.kv_head_of), hide, start)
    else:
        with st.spinner(ui.t("heads.deriving_all", h=head, L=tr.n_layers)):
            g = cache.head_across_layers(tr, head, hide, start)
    presenter.chart(inside_fig.fig_head_grid(g.maps, g.titles, tr.tokens, lang, g.cols, g.view), width="stretch", key="heads_grid")
    if note := inside_fig.map_note(g.view, lang, g.maps):
        st.caption(note)
    key, args = heads.sharing_note(tr.n_heads, tr.n_kv_heads)  # worded from this model's own counts
    st.caption(ui.t(key, **args))
    ui.badge("model", ui.t("heads.hidden_badge") if hide else None)
    return hide


def _query(tr, layer: int, head: int, hide: bool, lang: str) -> None:
    T = tr.n_tokens
    contents.section("heads.query_title", anchor="query", l=layer, h=head)
    q = widgets.int_slider(ui.t("heads.query_pick"), 0, T - 1, ui.qp_int("pos", T - 1, 0, T - 1), key="heads_q")
    ui.set_qp(pos=q)
    w = ui.site(tr, "attn_pattern", layer)
    if w is None:
        return
    start = widgets.map_window("heads_qwin", q + 1, kind="row", param="qwin")  # above 64 keys: overview or a window
    presenter.chart(inside_fig.fig_query_bars(heads.query_row(w[head], q, hide), tr.tokens, q, lang, start),
                    width="stretch")
    ui.badge("model", ui.t("heads.hidden_badge") if hide else None)


def _she_view(tr) -> examples.View | None:
    """Seed 000's 她 → 小红 read off this trace (every layer's weights), when the prompt is that example."""
    return examples.view_of(tr, lambda layer: ui.site(tr, "attn_pattern", layer))


def _open_example() -> None:
    """Button callback: the example's prompt, without the chat template; the sliders follow on the next run."""
    st.session_state["prompt"] = examples.SHE.prompt
    st.session_state["chat"] = False
    st.session_state["_heads_example"] = True


def _example_put(tr) -> None:
    """After the example's button: the layer, head and query sliders moved to its view, before they are drawn."""
    if not st.session_state.pop("_heads_example", False):
        return
    v = _she_view(tr)
    if v is not None:
        ui.set_qp(layer=v.layer, head=v.head, pos=v.query_pos)
        for key, value in (("heads_layer", v.layer), ("heads_head", v.head), ("heads_q", v.query_pos)):
            widgets.put(key, value)


def _example(tr, lang: str) -> None:
    """Seed 000's example in one click: the button (or a link) opens the single-query view at 她."""
    contents.section("heads.example_title")
    v = _she_view(tr)
    if v is None:
        st.markdown(ui.t("heads.example_intro", prompt=examples.SHE.prompt))
        st.button(ui.t("heads.example_btn"), key="heads_example_btn", on_click=_open_example)
        return
    st.markdown(ui.t("heads.example_text", **v.fill()))
    url = examples.link(v, lang) + ("&present=1" if presenter.is_on() else "")
    st.markdown(f"[{ui.t('heads.example_link')}]({url})")
    ui.badge("model")


def _atlas(tr, layer: int, head: int, lang: str) -> None:
    contents.section("heads.atlas_title")
    st.markdown(ui.t("heads.atlas_intro"))
    if tr.n_tokens > heads.ATLAS_EAGER and not st.toggle(ui.t("heads.atlas_long", T=tr.n_tokens, L=tr.n_layers), key="heads_atlas_on"):
        return  # every layer must be derived for the atlas: on a long prompt only when asked
    with st.spinner(ui.t("heads.deriving_atlas", L=tr.n_layers)):
        atlas = cache.atlas(tr)
    metric = widgets.radio_url(ui.t("heads.metric"), heads.METRICS, heads.METRICS[0], format_func=ui.fmt("heads.metric_{}"),
                               horizontal=True, key="heads_metric", param="metric")
    presenter.chart(inside_fig.fig_atlas(getattr(atlas, metric), ui.t(f"heads.metric_{metric}"), ui.t(f"heads.unit_{metric}"), lang,
                                         (layer, head)), width="stretch")
    ui.badge("model", ui.t("heads.atlas_badge"))
    c1, c2 = st.columns([3, 1])
    pick = c1.selectbox(ui.t("heads.jump"), heads.best_heads(atlas, metric), format_func=heads.head_label, placeholder=ui.t("ui.choose"), key="heads_jump_pick")
    c2.button(ui.t("heads.jump_btn"), on_click=_jump, args=(pick[0], pick[1]), key="heads_jump_btn")


def render(tr) -> None:
    lang = ui.lang()
    _example_put(tr)
    layer, head = widgets.layer_head_pickers("heads", tr.n_layers, tr.n_heads)
    hide = _grid(tr, layer, head, lang)
    _query(tr, layer, head, hide, lang)
    _example(tr, lang)
    _atlas(tr, layer, head, lang)
    ui.download_trace(tr, "heads")


page.run(render)
