"""Mask gallery: which query may read which key — causal, padding, both, bidirectional, cross,
sliding window — each as a ✓/× grid and as the additive 0/−∞ matrix; plus the real model's mask."""

from __future__ import annotations

import streamlit as st

from core.engine.tokens import position_labels
from core.inside import figures as inside_fig
from core.maths import attention as A
from core.maths import figures as P
from core.plot import attnview
from core.web import page, presenter, ui, widgets

TABS = ("causal", "padding", "causal_padding", "bidirectional", "cross", "sliding", "real")


def _panel(panel: A.MaskPanel, lang: str) -> None:
    """One mask, side by side: the ✓/× grid and the additive matrix."""
    title = ui.t(f"masks.title_{panel.key}")
    c1, c2 = st.columns(2)
    presenter.chart_in(c1, P.mask_figure(panel.visible, f"{title} · ✓/×", lang, row_labels=panel.rows, col_labels=panel.cols),
                    width="stretch", key=f"masks_fig_{panel.key}_grid")
    presenter.chart_in(c2, P.mask_figure(panel.visible, f"{title} · 0 / −∞", lang, additive=True, row_labels=panel.rows,
                                  col_labels=panel.cols), width="stretch", key=f"masks_fig_{panel.key}_add")
    ui.badge("formula")


def _real_tab(lang: str) -> None:
    """The traced pattern of one head, where it is non-zero, and how that sits against causality."""
    st.markdown(ui.t("masks.about_real"))
    tr = ui.current_trace()
    if tr is None:
        return
    layer, head = widgets.layer_head_pickers("masks", tr.n_layers, tr.n_heads)
    w = ui.site(tr, "attn_pattern", layer)
    if w is None:
        return
    pattern = w[head]  # [T, T] float16, HF eager's numbers for this layer
    view = attnview.view(pattern, widgets.map_window("masks", tr.n_tokens))
    labels = attnview.labels(view, position_labels(tr.tokens))
    presenter.chart(P.matrix_figure(view.z, ui.t("masks.fig_pattern", l=layer, h=head), labels, labels, lang),
                    width="stretch", key="masks_fig_real_pattern")
    if note := inside_fig.map_note(view, lang):
        st.caption(note)
    ui.badge("model")
    if view.exact:  # where the weights are non-zero: only meaningful cell by cell
        presenter.chart(P.mask_figure(A.pattern_support(view.z), ui.t("masks.fig_support"), lang, row_labels=labels,
                                      col_labels=labels), width="stretch", key="masks_fig_real_support")
    s = A.support_readout(pattern)
    m1, m2 = st.columns(2)
    m1.metric(ui.t("masks.above"), s["above"])
    m2.metric(ui.t("masks.below"), s["below"])
    st.caption(ui.t("masks.fp16_note"))
    ui.badge("model")
    ui.download_trace(tr, "masks")


def render() -> None:
    lang = ui.lang()
    c1, c2, c3, c4 = st.columns(4)
    T = c1.slider(ui.t("masks.T"), 2, 12, 4, key="masks_T")
    la = c2.slider(ui.t("masks.len_a"), 1, 8, 4, key="masks_len_a")
    lb = c3.slider(ui.t("masks.len_b"), 1, 8, 2, key="masks_len_b")
    window = c4.slider(ui.t("masks.window"), 1, 12, 3, key="masks_window")
    gallery = A.mask_gallery(T, (la, lb), window, T_enc=T + 1, lang=lang)
    tabs = st.tabs([ui.t(f"masks.tab_{k}") for k in TABS])
    for name, tab in zip(TABS[:-1], tabs):
        with tab:  # the grids first, on the first screen; what they show under them
            for panel in gallery[name]:
                _panel(panel, lang)
            st.markdown(ui.t(f"masks.about_{name}", w=window))
    with tabs[-1]:
        _real_tab(lang)

page.run(render)
