"""Same token, different context: one token's residual stream in two prompts, layer by layer."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.engine.tokens import position_label
from core.inside import embeddings
from core.inside import figures as inside_fig
from core.web import presenter, ui


def _pick(col, label: str, tr, default: int, key: str) -> int:
    return col.selectbox(label, range(tr.n_tokens), index=min(default, tr.n_tokens - 1),
                         format_func=lambda i: f"{position_label(tr.tokens, i)} (id {int(tr.token_ids[i])})", key=key)


def render() -> None:
    ui.header("page.context", "context.intro")
    loaded = ui.loaded_model()
    if loaded is None:
        return
    lang = ui.lang()
    names = list(embeddings.CONTEXT_PAIRS)
    preset = st.selectbox(ui.t("context.preset"), names, format_func=ui.fmt("context.preset_{}"), key="context_preset")
    a0, b0, word = embeddings.CONTEXT_PAIRS[preset]
    c1, c2 = st.columns(2)
    pa = c1.text_input(ui.t("context.prompt_a"), a0, key=f"context_a_{preset}", max_chars=2000)
    pb = c2.text_input(ui.t("context.prompt_b"), b0, key=f"context_b_{preset}", max_chars=2000)
    ta = ui.current_trace(pa, chat_mode=False)
    tb = ui.current_trace(pb, chat_mode=False)
    if ta is None or tb is None:
        return
    da, db = embeddings.default_positions(ta.token_ids, tb.token_ids, embeddings.word_ids(loaded.tokenizer, word))
    ia = _pick(c1, ui.t("context.pos_a"), ta, da, f"context_pa_{preset}_{abs(hash(pa))}")
    ib = _pick(c2, ui.t("context.pos_b"), tb, db, f"context_pb_{preset}_{abs(hash(pb))}")
    if ta.resid.shape[0] != tb.resid.shape[0]:
        st.error(ui.t("context.mismatch"))
        return

    sim = embeddings.context_similarity(ta.resid, ia, tb.resid, ib)
    base = embeddings.context_baseline(ta.resid, ia, tb.resid, ib)
    same_id = int(ta.token_ids[ia]) == int(tb.token_ids[ib])
    if not same_id:
        st.warning(ui.t("context.diff_ids", a=int(ta.token_ids[ia]), b=int(tb.token_ids[ib])))
    elif embeddings.same_prefix(ta.token_ids, ia, tb.token_ids, ib):
        st.info(ui.t("context.same_prefix", p=ia))
    m1, m2, m3 = st.columns(3)
    m1.metric(ui.t("context.m_embed"), f"{sim[0]:.6f}")
    m2.metric(ui.t("context.m_min"), f"{sim.min():.3f}", help=ui.t("context.m_min_help", l=int(sim.argmin())))
    m3.metric(ui.t("context.m_last"), f"{sim[-1]:.3f}", help=ui.t("context.m_base_help", b=float(base[-1])))
    st.plotly_chart(inside_fig.fig_context(sim, base, lang), width="stretch")
    ui.badge("model", ui.t("context.badge", a=position_label(ta.tokens, ia), b=position_label(tb.tokens, ib)))
    st.markdown(ui.t("context.explain"))
    with st.expander(ui.t("context.table")):
        df = pd.DataFrame({ui.t("context.col_layer"): range(len(sim)), ui.t("context.col_sim"): sim, ui.t("context.col_base"): base})
        st.dataframe(df.style.format({ui.t("context.col_sim"): "{:.6f}", ui.t("context.col_base"): "{:.4f}"}), hide_index=True)
        ui.badge("model")


render()
presenter.sources("transformer")
