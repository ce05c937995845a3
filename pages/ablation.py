"""Attention is not explanation: zero a head (or a layer's attention) and watch the next-token
distribution, beside that head's attention map."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from core.engine import tokens
from core.engine.types import UnsupportedArchitectureError
from core.inside import ablation
from core.inside import figures as inside_fig
from core.web import cache, presenter, ui

MAX_ABLATION_TOKENS = 256  # each ablation is a fresh forward pass; keep it quick on a CPU


def _table(loaded, before: np.ndarray, after: np.ndarray) -> pd.DataFrame:
    rows = ablation.top_table(loaded.tokenizer, before, after, k=8)
    df = pd.DataFrame(rows).rename(columns={"token": ui.t("ui.token"), "p_before": ui.t("ablation.p_before"),
                                            "p_after": ui.t("ablation.p_after"), "delta": "Δp"})
    return df


def render() -> None:
    ui.header("page.ablation", "ablation.intro")
    tr = ui.current_trace()
    loaded = ui.loaded_model()
    if tr is None or loaded is None:
        return
    if loaded.kind != "hf":
        st.info(ui.t("ablation.needs_hf"))
        return
    if tr.n_tokens > MAX_ABLATION_TOKENS:
        st.warning(ui.t("ablation.too_long", n=tr.n_tokens, k=MAX_ABLATION_TOKENS))
        return
    lang, spec, (L, H) = ui.lang(), ui.model_spec(), (tr.n_layers, tr.n_heads)
    layer, head = ui.layer_head_pickers("ablation", L, H)
    scope = st.radio(ui.t("ablation.scope"), ["head", "layer"], horizontal=True, key="ablation_scope",
                     format_func=ui.fmt("ablation.scope_{}", l=layer, h=head))
    ids = tuple(int(i) for i in tr.token_ids)
    try:
        before = cache.probs(spec, ids, ())
        after = cache.probs(spec, ids, ((layer, head if scope == "head" else None),))
        kl_layer = cache.layer_sweep(spec, ids, layer)
    except UnsupportedArchitectureError as e:
        st.error(ui.t("err.unsupported", msg=str(e)))
        return
    eff = ablation.effect(before, after)
    top, new = tokens.readable_tokens(loaded.tokenizer, [eff.top_id, eff.new_top_id])
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("ablation.m_kl"), f"{eff.kl:.4g}")
    m2.metric(ui.t("ablation.m_top", tok=top), f"{eff.p_after:.2%}", f"{eff.delta:+.2%}")
    m3.metric(ui.t("ablation.m_new"), new, ui.t("ablation.same") if eff.new_top_id == eff.top_id else ui.t("ablation.changed"),
              delta_color="off")
    left, right = st.columns(2)
    with left:
        st.markdown(f"**{ui.t('ablation.table_title')}**")
        st.dataframe(_table(loaded, before, after).style.format({ui.t("ablation.p_before"): "{:.2%}", ui.t("ablation.p_after"): "{:.2%}",
                                                                 "Δp": "{:+.2%}"}), hide_index=True, width="stretch")
        ui.badge("model", ui.t("ablation.badge_probs"))
    with right:
        atlas = cache.atlas(spec, tr.prompt, tr.chat)
        title = ui.t("ablation.map_title", l=layer, h=head, s=float(atlas.max_weight[layer, head]), e=float(atlas.entropy[layer, head]))
        st.plotly_chart(inside_fig.fig_single_map(tr.attn_pattern[layer, head].astype(float), tr.tokens, title, lang), width="stretch")
        ui.badge("model")

    st.subheader(ui.t("ablation.sweep_title", l=layer))
    sharp = atlas.max_weight[layer]  # [H]
    st.plotly_chart(inside_fig.fig_sweep(sharp, kl_layer, [f"h{h}" for h in range(H)], head if scope == "head" else None, lang),
                    width="stretch")
    hs, hk = int(np.argmax(sharp)), int(np.argmax(kl_layer))
    st.markdown(ui.t("ablation.sweep_result", hs=hs, s=float(sharp[hs]), ks=float(kl_layer[hs]), hk=hk, k=float(kl_layer[hk]),
                     sk=float(sharp[hk])))
    ui.badge("model", ui.t("ablation.badge_sweep", n=H))
    if st.toggle(ui.t("ablation.all_toggle", n=L * H), key="ablation_all"):
        with st.spinner(ui.t("ablation.all_wait", n=L * H)):
            kl_all = cache.model_sweep(spec, ids)  # [L, H]
        names = [f"L{i}·h{h}" for i in range(L) for h in range(H)]
        chosen = layer * H + head if scope == "head" else None
        st.plotly_chart(inside_fig.fig_sweep(atlas.max_weight.ravel(), kl_all.ravel(), names, chosen, lang), width="stretch")
        ui.badge("model", ui.t("ablation.badge_sweep", n=L * H))
    st.markdown(ui.t("ablation.lesson"))


render()
presenter.sources("attention")
