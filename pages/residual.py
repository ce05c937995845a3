"""Residual stream & block: stream norms, attention vs MLP writes, a norm and the SwiGLU MLP by hand."""

import numpy as np
import streamlit as st

from core.common import escape
from core.engine.tokens import position_label
from core.stream import figures as ps
from core.stream import lens
from core.web import cache, contents, page, presenter, ui, widgets

ACT_AT_ONCE = 1_024  # tokens up to which the model's own gate activation is derived without asking


def _pick_token(tokens, key: str) -> int:
    """A position picker bound to the URL's ``pos`` (default: the last token)."""
    T = len(tokens)
    pos = st.selectbox(ui.t("residual.pick_token"), range(T), index=ui.qp_int("pos", T - 1, 0, T - 1),
                       format_func=lambda i: position_label(tokens, i), placeholder=ui.t("ui.choose"), key=key)
    ui.set_qp(pos=pos)
    return pos


def _where(tr, layer: int, pos: int) -> str:
    """The badge detail of the by-hand views: which layer, which token."""
    return ui.t("residual.where", l=layer, p=widgets.md(position_label(tr.tokens, pos)))


def _norms(tr, lang: str) -> None:
    contents.section("residual.h_norms")
    picture = st.container()  # the picture first, on the first screen; its colour scale and window under it
    log = st.toggle(ui.t("residual.log"), value=True, key="residual_log")
    start = widgets.map_window("residual", tr.n_tokens, kind="strip")  # above 64 positions: overview or a window
    presenter.chart_in(picture, ps.fig_stream_norms(lens.stream_norms(tr), list(tr.tokens), lang, log, start), width="stretch",
                       key="residual_fig_norms")
    ui.badge("model")
    st.caption(ui.t("residual.norms_note"))


def _sublayers(tr, lang: str) -> tuple[int, int]:
    contents.section("residual.h_sub")
    layer, _ = widgets.layer_head_pickers("residual", tr.n_layers, tr.n_heads, with_head=False)
    pos = _pick_token(list(tr.tokens), "residual_pos")
    one = st.toggle(ui.t("residual.one_token"), value=False, key="residual_one")
    a, m = lens.sublayer_norms(tr, pos if one else None)
    title = ui.t("residual.fig_sub_tok", tok=escape.plot(position_label(tr.tokens, pos))) if one else ui.t("residual.fig_sub_mean")
    presenter.chart(ps.fig_sublayer_norms(a, m, lang, title), width="stretch")
    ui.badge("model")
    return layer, pos


def _norm(loaded, tr, layer: int, pos: int, lang: str) -> None:
    try:
        opts = [ui.t("residual.norm_attn"), ui.t("residual.norm_mlp")]  # translated labels, mapped back below
        which = ("attn", "mlp")[opts.index(st.radio(ui.t("residual.which_norm"), opts, horizontal=True, key=f"residual_which_{lang}"))]
        ns = lens.block_norm_steps(loaded, tr, layer, pos, which, cache.door(tr))
    except Exception as e:  # a model whose blocks have other names: say so, never a traceback
        st.info(ui.t("residual.unsupported", msg=widgets.md(e)))
        return
    contents.section("residual.h_norm", kind=ns.kind)
    st.caption(ui.t("residual.norm_formula"))
    for col, (key, value) in zip(st.columns(3), lens.norm_metrics(ns)):
        col.metric(ui.t(key), value)
    presenter.chart(ps.fig_norm_steps(ns, lang), width="stretch")
    ui.badge("model", _where(tr, layer, pos))


def _mlp(loaded, tr, layer: int, pos: int, lang: str, facts: dict) -> None:
    contents.section("residual.h_mlp")
    st.caption(ui.t("residual.mlp_formula", ff=facts.get("d_ff", "?")))
    # the model's own gate activation is a derived site: one replay of the layer's MLP over every position
    # (+0.25× a first visit on the 3,184-token document), so a long prompt derives it on request
    own_act = tr.n_tokens <= ACT_AT_ONCE or cache.has_site(tr, "gate_act", layer)
    try:
        ms = lens.mlp_steps(loaded, tr, layer, pos, cache.door(tr), own_act=own_act)
    except Exception as e:
        st.info(ui.t("residual.not_gated", msg=widgets.md(e)))
        return
    n_top = st.slider(ui.t("residual.n_top"), 5, 50, 20, key="residual_ntop")
    presenter.chart(ps.fig_mlp_neurons(ms, lang, n_top), width="stretch")
    ui.badge("model", _where(tr, layer, pos))
    kw = ms.args()
    st.caption(ui.t("residual.mlp_active", **kw))
    st.success(ui.t("residual.mlp_check", **kw))
    if ms.act_diff is not None:  # the model's own gate activation (site gate_act), read through the door
        st.caption(ui.t("sites.gate_act_check", diff=f"{ms.act_diff:.2e}", scale=f"{np.abs(ms.traced_act).max():.3g}"))
    elif not own_act and st.button(ui.t("residual.gate_act_ask", n=f"{tr.n_tokens:,}"), key="residual_gate_act"):
        with st.spinner(ui.t("residual.gate_act_deriving")):
            cache.site(tr, "gate_act", layer)
        st.rerun()


def _block(tr, lang: str, facts: dict) -> None:
    contents.section("residual.h_block", anchor="block")
    g, note = st.columns([3, 2])
    g.graphviz_chart(ps.block_dot(facts, tr.n_tokens, lang))
    note.caption(ui.t("residual.block_note", T=tr.n_tokens, L=tr.n_layers))
    ui.badge("model")


def render(loaded, tr) -> None:
    lang, facts = ui.lang(), lens.block_facts(tr, loaded)
    _norms(tr, lang)
    layer, pos = _sublayers(tr, lang)
    _norm(loaded, tr, layer, pos, lang)
    _mlp(loaded, tr, layer, pos, lang, facts)
    _block(tr, lang, facts)
    ui.download_trace(tr, "residual")


page.run(render)
