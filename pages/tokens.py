"""Tokens & embeddings: the prompt as token chips, the lookup as a row of E, ID distance vs
similarity, a PCA map of chosen words, and token vs sentence (RAG) embeddings."""

from __future__ import annotations

import streamlit as st

from core import backends
from core.engine.tokens import label, position_label
from core.inside import embeddings
from core.inside import figures as inside_fig
from core.web import cache, chips, contents, page, presenter, ui, widgets


def _chips(tr) -> None:
    contents.section("tokens.chips_title", anchor="chips")
    src = cache.sources(tr)[: tr.n_tokens]
    names = {k: ui.t(f"tokens.src_{k}") for k in set(src)}
    chips.show_page(tr.tokens, tr.token_ids, key="tokens", kinds=src, titles=[names[s] for s in src], positions=True,
                    where=st.container(key="tokens_view"))  # the page's main picture (tests/browser/test_fold_browser.py)
    st.caption(ui.t("tokens.chips_legend", **embeddings.source_counts(src)))
    if tr.chat:
        st.info(ui.t("tokens.chat_note"))
    elif "typed_special" in src:
        st.info(ui.t("tokens.typed_special_note"))
    ui.badge("model")


def _lookup(tr, loaded) -> bool:
    """The lookup as a row of E; False (with a note) when this model's matrix cannot be read."""
    contents.section("tokens.lookup_title")
    pos = st.selectbox(ui.t("ui.position"), range(tr.n_tokens), format_func=lambda i: position_label(tr.tokens, i), placeholder=ui.t("ui.choose"), key="tokens_pos")
    ndims = st.slider(ui.t("tokens.ndims"), 4, 32, 8, key="tokens_ndims")
    if not backends.is_hf(loaded):
        st.info(ui.t("tokens.needs_hf"))
        return False
    tid = int(tr.token_ids[pos])
    row, traced = cache.embedding_rows(loaded, (tid,))[0], tr.embeddings[pos]
    st.markdown(ui.t("tokens.lookup_text", id=tid, V=loaded.facts.vocab_size, d=tr.d_model, tok=widgets.code(label(tr.tokens, pos))))
    presenter.frame(embeddings.lookup_table(row, traced, tid, pos, ndims).style.format("{:+.4f}"), width="stretch")
    st.caption(ui.t("tokens.lookup_check", diff=embeddings.max_gap(row, traced)))
    ui.badge("model")
    return True


def _id_distance(loaded, lang: str) -> None:
    contents.section("tokens.iddist_title", anchor="iddist")
    s = cache.id_study(loaded)
    presenter.chart(inside_fig.fig_id_distance(s.distance, s.cosine, s.example, lang), width="stretch")
    st.markdown(ui.t("tokens.iddist_result", **embeddings.id_study_args(s, loaded.tokenizer)))
    ui.badge("model", ui.t("tokens.iddist_badge", n=len(s.cosine)))


def _pca(loaded, lang: str) -> None:
    contents.section("tokens.pca_title")
    text = st.text_input(ui.t("tokens.pca_words"), ui.t("tokens.pca_default"), key="tokens_words", max_chars=600)
    words, pieces, coords, expl = cache.pca_words(loaded, tuple(embeddings.parse_words(text)))
    if len(words) < 2:
        st.info(ui.t("tokens.pca_need_two"))
        return
    presenter.chart(inside_fig.fig_pca(words, coords, expl, lang), width="stretch")
    # the words are the user's own text: shown as typed, never rendered as Markdown or HTML
    st.caption(embeddings.pca_caption([widgets.md(w) for w in words], [widgets.md(p) for p in pieces], lang))
    ui.badge("model")


def _rag(loaded, lang: str) -> None:
    contents.section("tokens.cmp_title")
    st.table(embeddings.compare_table(lang), hide_index=True)  # sentences in cells: wrapped, never cut
    sentences = embeddings.rag_sentences(lang)  # in the page's language
    vecs = [cache.sentence_vector(loaded, s) for s in sentences]
    st.markdown(ui.t("tokens.rag_demo"))
    st.table(embeddings.similarity_table(sentences, vecs).style.format("{:.3f}"))
    st.caption(ui.t("tokens.rag_caveat"))
    ui.badge("model", ui.t("tokens.rag_badge"))


def _exercise(loaded) -> None:
    """Seed 003's objective 2: the lookup tried on normal and abnormal inputs, and a regression check that
    names the first position where two inputs part (IDs and rows read from the tokenizer and E directly)."""
    contents.section("tokens.probe_title")
    st.markdown(ui.t("tokens.probe_intro"))
    E = embeddings.embedding_matrix(loaded)
    table = embeddings.probe_table(loaded.tokenizer, E)
    table["kind"] = [ui.t(f"tokens.probe_{k}") for k in table["kind"]]
    presenter.frame(table.style.format({"E[id0][0]": "{:+.4f}", "‖E[id0]‖": "{:.3f}"}, na_rep="—"), hide_index=True, width="stretch")
    c1, c2 = st.columns(2)
    a = c1.text_input(ui.t("tokens.probe_a"), embeddings.REGRESSION_PAIR[0], key="tokens_probe_a", max_chars=400)
    b = c2.text_input(ui.t("tokens.probe_b"), embeddings.REGRESSION_PAIR[1], key="tokens_probe_b", max_chars=400)
    ids_a, ids_b = embeddings.text_ids(loaded.tokenizer, a), embeddings.text_ids(loaded.tokenizer, b)
    dev = embeddings.first_deviation(ids_a, embeddings.lookup(E, ids_a), ids_b, embeddings.lookup(E, ids_b))
    st.code(f"A: {ids_a}\nB: {ids_b}", language=None, wrap_lines=True)
    if dev.position is None:
        st.success(ui.t("tokens.probe_same", n=dev.n_a))
    else:
        gap = ui.t("tokens.probe_gap", gap=f"{dev.row_gap:.4f}") if dev.row_gap is not None else ui.t("tokens.probe_end")
        st.warning(ui.t("tokens.probe_first", p=dev.position, a="—" if dev.id_a is None else dev.id_a,
                        b="—" if dev.id_b is None else dev.id_b, gap=gap, na=dev.n_a, nb=dev.n_b))
    ui.badge("model")


def render(loaded, tr) -> None:
    lang = ui.lang()
    _chips(tr)
    ui.english_note(ui.prompt())  # a Chinese prompt on SmolLM2: what one character costs, beside English (under the chips)
    if not _lookup(tr, loaded):
        return
    _exercise(loaded)
    _id_distance(loaded, lang)
    _pca(loaded, lang)
    _rag(loaded, lang)
    ui.download_trace(tr, "tokens")


page.run(render)
