"""Tokens & embeddings: the prompt as token chips, the lookup as a row of E, ID distance vs
similarity, a PCA map of chosen words, and token vs sentence (RAG) embeddings."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.engine import tokens
from core.engine.tokens import position_label
from core.inside import embeddings
from core.inside import figures as inside_fig
from core.web import cache, chips, ui

SENTENCES = ("The cat sat on the mat.", "A kitten was resting on the rug.", "Stock prices fell sharply today.")


def _compare_table() -> pd.DataFrame:
    rows = ["id", "emb", "pos", "hidden", "rag"]
    cols = [ui.t("tokens.cmp_col_what"), ui.t("tokens.cmp_col_unit"), ui.t("tokens.cmp_col_role"), ui.t("tokens.cmp_col_not")]
    return pd.DataFrame([[ui.t(f"tokens.cmp_{r}_{c}") for c in ("what", "unit", "role", "not")] for r in rows], columns=cols)


def render() -> None:
    ui.header("page.tokens", "tokens.intro")
    tr = ui.current_trace()
    loaded = ui.loaded_model()
    if tr is None or loaded is None:
        return
    lang, spec = ui.lang(), ui.model_spec()

    st.subheader(ui.t("tokens.chips_title"))
    src = cache.sources(spec, tr.prompt, tr.chat)[: tr.n_tokens] if loaded.kind == "hf" else ["user"] * tr.n_tokens
    chips.show(tr.tokens, tr.token_ids, kinds=src, titles=[ui.t(f"tokens.src_{s}") for s in src], positions=True)
    st.caption(ui.t("tokens.chips_legend", n=tr.n_tokens, user=src.count("user"), tpl=src.count("template"), special=src.count("special")))
    if tr.chat:
        st.info(ui.t("tokens.chat_note"))
    ui.badge("model")

    st.subheader(ui.t("tokens.lookup_title"))
    pos = st.selectbox(ui.t("ui.position"), range(tr.n_tokens), format_func=lambda i: position_label(tr.tokens, i), key="tokens_pos")
    tid, d = int(tr.token_ids[pos]), tr.d_model
    ndims = st.slider(ui.t("tokens.ndims"), 4, 32, 8, key="tokens_ndims")
    if loaded.kind != "hf":
        st.info(ui.t("tokens.needs_hf"))
        return
    row = cache.embedding_rows(spec, (tid,))[0]
    st.markdown(ui.t("tokens.lookup_text", id=tid, V=loaded.facts.vocab_size, d=d, tok=tr.tokens[pos]))
    df = pd.DataFrame({f"E[{tid}, :]": row[:ndims], f"trace.embeddings[{pos}, :]": tr.embeddings[pos, :ndims]}).T
    st.dataframe(df.style.format("{:+.4f}"), width="stretch")
    st.caption(ui.t("tokens.lookup_check", diff=float(abs(row - tr.embeddings[pos]).max())))
    ui.badge("model")

    st.subheader(ui.t("tokens.iddist_title"))
    s = cache.id_study(spec)
    st.plotly_chart(inside_fig.fig_id_distance(s.distance, s.cosine, s.example, lang), width="stretch")
    ta, tb = tokens.readable_tokens(loaded.tokenizer, [s.example[0], s.example[1]])
    st.markdown(ui.t("tokens.iddist_result", n=len(s.cosine), r=s.pearson, rho=s.spearman, rand=s.mean_random, adj=s.mean_adjacent,
                     a=s.example[0], b=s.example[1], ta=ta, tb=tb, c=s.example[2]))
    ui.badge("model", ui.t("tokens.iddist_badge", n=len(s.cosine)))

    st.subheader(ui.t("tokens.pca_title"))
    text = st.text_input(ui.t("tokens.pca_words"), ui.t("tokens.pca_default"), key="tokens_words", max_chars=600)
    words, pieces, coords, expl = cache.pca_words(spec, tuple(embeddings.parse_words(text)))
    if len(words) < 2:
        st.info(ui.t("tokens.pca_need_two"))
    else:
        st.plotly_chart(inside_fig.fig_pca(words, coords, expl, lang), width="stretch")
        multi = [f"{w} → {p}" for w, p in zip(words, pieces) if " + " in p]
        st.caption(ui.t("tokens.pca_note") + (" " + ui.t("tokens.pca_multi", items="; ".join(multi)) if multi else ""))
        ui.badge("model")

    st.subheader(ui.t("tokens.cmp_title"))
    st.dataframe(_compare_table(), hide_index=True, width="stretch")
    vecs = [cache.sentence_vector(spec, s_) for s_ in SENTENCES]
    sims = [[embeddings.cosine(a, b) for b in vecs] for a in vecs]
    st.markdown(ui.t("tokens.rag_demo"))
    st.dataframe(pd.DataFrame(sims, index=list(SENTENCES), columns=list(SENTENCES)).style.format("{:.3f}"), width="stretch")
    st.caption(ui.t("tokens.rag_caveat"))
    ui.badge("model", ui.t("tokens.rag_badge"))
    ui.download_trace("tokens")


render()
