"""Tokens & embeddings: the prompt as token chips, the lookup as a row of E, ID distance vs
similarity, a PCA map of chosen words, and token vs sentence (RAG) embeddings."""

from __future__ import annotations

import streamlit as st

from core import backends
from core.engine.tokens import label, position_label
from core.inside import embeddings
from core.inside import figures as inside_fig
from core.web import cache, chips, presenter, ui, widgets


def _chips(tr, spec: str) -> None:
    st.header(ui.t("tokens.chips_title"))
    src = cache.sources(spec, tr.prompt, tr.chat)[: tr.n_tokens]
    names = {k: ui.t(f"tokens.src_{k}") for k in set(src)}
    chips.show_page(tr.tokens, tr.token_ids, key="tokens", kinds=src, titles=[names[s] for s in src], positions=True)
    st.caption(ui.t("tokens.chips_legend", **embeddings.source_counts(src)))
    if tr.chat:
        st.info(ui.t("tokens.chat_note"))
    elif "typed_special" in src:
        st.info(ui.t("tokens.typed_special_note"))
    ui.badge("model")


def _lookup(tr, loaded, spec: str) -> bool:
    """The lookup as a row of E; False (with a note) when this model's matrix cannot be read."""
    st.header(ui.t("tokens.lookup_title"))
    pos = st.selectbox(ui.t("ui.position"), range(tr.n_tokens), format_func=lambda i: position_label(tr.tokens, i), key="tokens_pos")
    ndims = st.slider(ui.t("tokens.ndims"), 4, 32, 8, key="tokens_ndims")
    if not backends.is_hf(loaded):
        st.info(ui.t("tokens.needs_hf"))
        return False
    tid = int(tr.token_ids[pos])
    row, traced = cache.embedding_rows(spec, (tid,))[0], tr.embeddings[pos]
    st.markdown(ui.t("tokens.lookup_text", id=tid, V=loaded.facts.vocab_size, d=tr.d_model, tok=widgets.code(label(tr.tokens, pos))))
    presenter.frame(embeddings.lookup_table(row, traced, tid, pos, ndims).style.format("{:+.4f}"), width="stretch")
    st.caption(ui.t("tokens.lookup_check", diff=embeddings.max_gap(row, traced)))
    ui.badge("model")
    return True


def _id_distance(loaded, spec: str, lang: str) -> None:
    st.header(ui.t("tokens.iddist_title"))
    s = cache.id_study(spec)
    presenter.chart(inside_fig.fig_id_distance(s.distance, s.cosine, s.example, lang), width="stretch")
    st.markdown(ui.t("tokens.iddist_result", **embeddings.id_study_args(s, loaded.tokenizer)))
    ui.badge("model", ui.t("tokens.iddist_badge", n=len(s.cosine)))


def _pca(spec: str, lang: str) -> None:
    st.header(ui.t("tokens.pca_title"))
    text = st.text_input(ui.t("tokens.pca_words"), ui.t("tokens.pca_default"), key="tokens_words", max_chars=600)
    words, pieces, coords, expl = cache.pca_words(spec, tuple(embeddings.parse_words(text)))
    if len(words) < 2:
        st.info(ui.t("tokens.pca_need_two"))
        return
    presenter.chart(inside_fig.fig_pca(words, coords, expl, lang), width="stretch")
    # the words are the user's own text: shown as typed, never rendered as Markdown or HTML
    st.caption(embeddings.pca_caption([widgets.md(w) for w in words], [widgets.md(p) for p in pieces], lang))
    ui.badge("model")


def _rag(spec: str, lang: str) -> None:
    st.header(ui.t("tokens.cmp_title"))
    st.table(embeddings.compare_table(lang), hide_index=True)  # sentences in cells: wrapped, never cut
    sentences = embeddings.rag_sentences(lang)  # in the page's language
    vecs = [cache.sentence_vector(spec, s) for s in sentences]
    st.markdown(ui.t("tokens.rag_demo"))
    st.table(embeddings.similarity_table(sentences, vecs).style.format("{:.3f}"))
    st.caption(ui.t("tokens.rag_caveat"))
    ui.badge("model", ui.t("tokens.rag_badge"))


def render() -> None:
    ui.header("page.tokens", "tokens.intro")
    got = ui.model_and_trace()
    if got is None:
        return
    loaded, tr = got
    lang, spec = ui.lang(), ui.model_spec()
    ui.english_note(ui.prompt())  # a Chinese prompt on SmolLM2: what one character costs, beside English
    _chips(tr, spec)
    if not _lookup(tr, loaded, spec):
        return
    _id_distance(loaded, spec, lang)
    _pca(spec, lang)
    _rag(spec, lang)
    ui.download_trace("tokens")


render()
