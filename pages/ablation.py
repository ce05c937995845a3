"""Attention is not explanation: zero a head (or a layer's attention) and watch the next-token
distribution, beside that head's attention map."""

from __future__ import annotations

import numpy as np
import streamlit as st

from core import backends
from core.engine import tokens
from core.engine.types import UnsupportedArchitectureError
from core.inside import ablation, heads
from core.inside import figures as inside_fig
from core.plot import attnview
from core.web import cache, page, presenter, ui, widgets


def _can_ablate(tr, loaded) -> bool:
    """Say why not, when this model or prompt cannot be ablated here."""
    if not backends.is_hf(loaded):
        st.info(ui.t("ablation.needs_hf"))
        return False
    if ablation.too_long(tr.n_tokens):
        st.warning(ui.t("ablation.too_long", n=tr.n_tokens, k=ablation.MAX_TOKENS))
        return False
    return True


def _target(tr) -> ablation.Target:
    layer, head = widgets.layer_head_pickers("ablation", tr.n_layers, tr.n_heads)
    scope = st.radio(ui.t("ablation.scope"), ["head", "layer"], horizontal=True, key="ablation_scope",
                     format_func=ui.fmt("ablation.scope_{}", l=layer, h=head))
    return ablation.Target(layer, head, scope)


def _metrics(loaded, eff: ablation.Effect) -> None:
    top, new = tokens.visible_tokens(loaded.tokenizer, [eff.top_id, eff.new_top_id])
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("ablation.m_kl"), f"{eff.kl:.4g}")
    moved = ablation.points_text(eff.delta, ui.lang()) if abs(eff.delta) >= 5e-5 else None  # an arrow only where it rose or fell
    m2.metric(ui.t("ablation.m_top", tok=widgets.code(top)), f"{eff.p_after:.2%}", moved)
    m3.metric(ui.t("ablation.m_new"), new)
    m3.caption(ui.t("ablation.same") if eff.same_top else ui.t("ablation.changed"))


def _table_and_map(tr, loaded, before: np.ndarray, after: np.ndarray, target: ablation.Target, lang: str) -> heads.HeadAtlas:
    """The probability table beside the ablated head's map; returns the head atlas (read in the map's column)."""
    left, right = st.columns(2)
    with left:
        st.markdown(f"**{ui.t('ablation.table_title')}**")
        presenter.frame(ablation.top_frame(loaded.tokenizer, before, after, lang), hide_index=True, width="stretch")
        ui.badge("model", ui.t("ablation.badge_probs"))
    with right:
        layer, head = target.layer, target.head
        atlas = cache.atlas(tr)
        title = ui.t("ablation.map_title", l=layer, h=head, **heads.head_stats(atlas, layer, head))
        w = ui.site(tr, "attn_pattern", layer)
        if w is not None:
            v = attnview.overview(w[head])
            presenter.chart(inside_fig.fig_single_map(v.z, tr.tokens, title, lang, v), width="stretch")
            if note := inside_fig.map_note(v, lang):
                st.caption(note)
        ui.badge("model")
    return atlas


def _sweeps(tr, loaded, ids: tuple[int, ...], kl_layer: np.ndarray, target: ablation.Target, atlas, lang: str) -> None:
    L, H = tr.n_layers, tr.n_heads
    st.header(ui.t("ablation.sweep_title", l=target.layer))
    sharp = atlas.max_weight[target.layer]  # [H]
    presenter.chart(inside_fig.fig_sweep(sharp, kl_layer, ablation.head_names(H), target.marked, lang), width="stretch")
    st.markdown(ui.t("ablation.sweep_result", **ablation.sweep_args(sharp, kl_layer)))
    ui.badge("model", ui.t("ablation.badge_sweep", n=H))
    if st.toggle(ui.t("ablation.all_toggle", n=L * H), key="ablation_all"):
        with st.spinner(ui.t("ablation.all_wait", n=L * H)):
            kl_all = cache.model_sweep(loaded, ids)  # [L, H]
        presenter.chart(inside_fig.fig_sweep(atlas.max_weight.ravel(), kl_all.ravel(), ablation.head_names(H, L), target.marked_in_model(H),
                                             lang), width="stretch")
        ui.badge("model", ui.t("ablation.badge_sweep", n=L * H))


def render(loaded, tr) -> None:
    if not _can_ablate(tr, loaded):
        return
    lang = ui.lang()
    target = _target(tr)
    ids = tuple(int(i) for i in tr.token_ids)
    try:
        before, after = cache.probs(loaded, ids, ()), cache.probs(loaded, ids, target.ablate)
        kl_layer = cache.layer_sweep(loaded, ids, target.layer)
    except UnsupportedArchitectureError as e:
        st.error(ui.t("err.unsupported", msg=ui.error_md(e)))
        return
    _metrics(loaded, ablation.effect(before, after))
    atlas = _table_and_map(tr, loaded, before, after, target, lang)
    _sweeps(tr, loaded, ids, kl_layer, target, atlas, lang)
    st.markdown(ui.t("ablation.lesson"))


page.run(render)
