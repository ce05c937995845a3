"""Residual stream & block: stream norms, attention vs MLP writes, a norm and the SwiGLU MLP by hand."""

import numpy as np
import streamlit as st

from core.engine.tokens import position_label
from core.stream import figures as ps
from core.stream import lens
from core.web import presenter, ui


def _pick_token(tokens, key: str) -> int:
    """A position picker bound to the URL's ``pos`` (default: the last token)."""
    T = len(tokens)
    pos = st.selectbox(ui.t("residual.pick_token"), range(T), index=ui.qp_int("pos", T - 1, 0, T - 1),
                       format_func=lambda i: position_label(tokens, i), key=key)
    ui.set_qp(pos=pos)
    return pos


def render() -> None:
    ui.header("page.residual", "residual.intro")
    tr = ui.current_trace()
    loaded = ui.loaded_model() if tr is not None else None
    if tr is None or loaded is None:
        return
    lang, t = ui.lang(), ui.t
    T, L = tr.n_tokens, tr.n_layers

    st.subheader(t("residual.h_norms"))
    log = st.toggle(t("residual.log"), value=True, key="residual_log")
    st.plotly_chart(ps.fig_stream_norms(lens.stream_norms(tr), list(tr.tokens), lang, log), width="stretch")
    ui.badge("model")
    st.caption(t("residual.norms_note"))

    st.subheader(t("residual.h_sub"))
    layer, _ = ui.layer_head_pickers("residual", L, tr.n_heads, with_head=False)
    pos = _pick_token(list(tr.tokens), "residual_pos")
    one = st.toggle(t("residual.one_token"), value=False, key="residual_one")
    a, m = lens.sublayer_norms(tr, pos if one else None)
    title = t("residual.fig_sub_tok", tok=position_label(tr.tokens, pos)) if one else t("residual.fig_sub_mean")
    st.plotly_chart(ps.fig_sublayer_norms(a, m, lang, title), width="stretch")
    ui.badge("model")

    try:
        opts = [t("residual.norm_attn"), t("residual.norm_mlp")]  # translated labels, mapped back below
        which = ("attn", "mlp")[opts.index(st.radio(t("residual.which_norm"), opts, horizontal=True, key=f"residual_which_{lang}"))]
        ns = lens.block_norm_steps(loaded, tr, layer, pos, which)
    except Exception as e:  # a model whose blocks have other names: say so, never a traceback
        st.info(t("residual.unsupported", msg=str(e)))
        ns = None
    if ns is not None:
        st.subheader(t("residual.h_norm", kind=ns.kind))
        st.caption(t("residual.norm_formula"))
        c1, c2, c3 = st.columns(3)
        c1.metric(t("residual.rms_in"), f"{ns.rms_in:.4g}")
        c2.metric(t("residual.rms_hat"), f"{ns.rms_normed:.4g}")
        c3.metric(t("residual.rms_out"), f"{ns.rms_out:.4g}")
        st.plotly_chart(ps.fig_norm_steps(ns, lang), width="stretch")
        ui.badge("model", f"{t('ui.layer')} {layer} · {position_label(tr.tokens, pos)}")

    st.subheader(t("residual.h_mlp"))
    st.caption(t("residual.mlp_formula", ff=tr.meta.get("facts", {}).get("d_ff", "?")))
    try:
        ms = lens.mlp_steps(loaded, tr, layer, pos)
    except Exception as e:
        st.info(t("residual.not_gated", msg=str(e)))
        ms = None
    if ms is not None:
        n_top = st.slider("n", 5, 50, 20, key="residual_ntop", label_visibility="collapsed")
        st.plotly_chart(ps.fig_mlp_neurons(ms, lang, n_top), width="stretch")
        ui.badge("model", f"{t('ui.layer')} {layer} · {position_label(tr.tokens, pos)}")
        st.caption(t("residual.mlp_active", k=ms.n_for_mass(0.9), ff=len(ms.prod)))
        st.success(t("residual.mlp_check", diff=f"{ms.max_abs_diff:.2e}", scale=f"{np.abs(ms.traced).max():.3g}"))

    st.subheader(t("residual.h_block"))
    g, note = st.columns([3, 2])
    g.graphviz_chart(ps.block_dot(tr.meta.get("facts", {}) or _facts(loaded), T, lang))
    note.caption(t("residual.block_note", T=T, L=L))
    ui.badge("model")
    ui.download_trace("residual")


def _facts(loaded) -> dict:
    return loaded.facts.to_dict()


render()
presenter.sources("transformer")
