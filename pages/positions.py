"""Positions: the sinusoidal encoding, learned vs RoPE, RoPE as rotating 2-D pairs, the
relative-offset property, and RoPE reproducing the real model's queries."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from core.maths import figures as P
from core.maths import positions as R
from core.web import cache, nav, presenter, ui


def _methods_table() -> pd.DataFrame:
    cols = [ui.t(f"positions.col_{c}") for c in ("method", "where", "relative", "examples")]
    return pd.DataFrame([[ui.t(f"positions.row_{m}_{c}") for c in ("name", "where", "relative", "examples")]
                         for m in ("sin", "learned", "rope")], columns=cols)


def render() -> None:
    ui.header("page.positions", "positions.intro")
    lang, loaded = ui.lang(), ui.loaded_model()
    theta = float(loaded.facts.rope_theta or 10000.0) if loaded is not None else 10000.0
    tabs = st.tabs([ui.t(f"positions.tab_{k}") for k in ("sin", "kinds", "rope", "relative", "real")])
    with tabs[0]:
        st.markdown(ui.t("positions.sin_intro"))
        c1, c2 = st.columns(2)
        T = c1.slider(ui.t("positions.T"), 8, 256, 64, key="positions_T")
        d = c2.slider(ui.t("positions.d"), 8, 256, 128, step=2, key="positions_d")
        pe = R.sinusoidal(T, d)
        st.plotly_chart(P.sinusoidal_figure(pe, lang), width="stretch")
        ui.badge("formula")
        p, i = min(5, T - 1), min(3, d // 2 - 1)
        s, c = R.sinusoidal_entry(p, i, d)
        st.caption(ui.t("positions.sin_check", p=p, i=2 * i, j=2 * i + 1, a=f"{pe[p, 2 * i]:.6f}", b=f"{s:.6f}",
                        c=f"{pe[p, 2 * i + 1]:.6f}", e=f"{c:.6f}"))
    with tabs[1]:
        st.markdown(ui.t("positions.kinds_intro"))
        st.dataframe(_methods_table(), hide_index=True, width="stretch")
        if loaded is not None:
            st.info(ui.t("positions.this_model", name=loaded.facts.name, kind=loaded.facts.position_type))
        nav.page_link("toy", label=ui.t("positions.toy_link"), icon="🧪")
    with tabs[2]:
        st.markdown(ui.t("positions.rope_intro", th=f"{theta:g}"))
        dh = loaded.facts.head_dim if loaded is not None else 64
        c1, c2 = st.columns(2)
        pair = c1.slider(ui.t("positions.pair"), 0, dh // 2 - 1, 4, key="positions_pair")
        pos = c2.slider(ui.t("ui.position"), 0, 31, 3, key="positions_pos")
        th_i = float(R.rope_inv_freq(dh, theta)[pair])
        st.plotly_chart(P.rope_pair_figure(R.pair_trajectory((1.0, 0.0), np.arange(32), th_i), pos, th_i, lang), width="stretch")
        st.caption(ui.t("positions.pair_caption", i=pair, j=pair + dh // 2, th=f"{th_i:.4g}", p=pos, a=f"{pos * th_i:.4f}"))
        ui.badge("formula")
    with tabs[3]:
        st.markdown(ui.t("positions.relative_intro"))
        demo = R.relative_demo(64, theta)
        st.plotly_chart(P.rope_offset_figure(demo["table"], demo["offsets"], demo["shifts"], lang), width="stretch")
        pairs = [(5, 2), (105, 102), (1005, 1002), (5, 4)]
        st.dataframe(pd.DataFrame({"(m, n)": [str(mn) for mn in pairs], "m − n": [m - n for m, n in pairs],
                                   "q·k": [R.rope_score(demo["q"], demo["k"], m, n, theta) for m, n in pairs]}), hide_index=True)
        ui.badge("formula")
    with tabs[4]:
        st.markdown(ui.t("positions.real_intro"))
        tr = ui.current_trace()
        if tr is None or loaded is None:
            return
        if loaded.facts.position_type != "RoPE" or loaded.kind != "hf":
            st.info(ui.t("positions.not_rope", kind=loaded.facts.position_type))
            return
        layer = ui.layer_slider("positions_layer", tr.n_layers)
        try:
            chk = cache.rope_check(ui.model_spec(), ui.prompt(), ui.chat(), layer)
        except (ValueError, AttributeError) as e:
            st.info(ui.t("positions.not_rope", kind=str(e)))
            return
        m1, m2 = st.columns(2)
        m1.metric(ui.t("positions.diff_rot"), f"{float(chk['max_diff']):.2e}")
        m2.metric(ui.t("positions.diff_raw"), f"{float(np.abs(chk['raw'] - tr.q[layer]).max()):.3g}")
        ui.badge("model")
        ui.download_trace("positions")


render()
presenter.sources("positions")
