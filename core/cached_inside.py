"""Streamlit caches for the "inside the real model" pages (embeddings, ablation). Each entry is keyed
on (model spec, inputs, settings) and bounded, so moving a slider that only changes what is *looked
at* never runs the model again."""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st

from core import ablation, cached, embeddings, heads, tracing


@st.cache_data(show_spinner=False, max_entries=4)
def id_study(spec: str, n_pairs: int = 2000, seed: int = 0) -> embeddings.IdDistanceStudy:
    return embeddings.id_distance_study(embeddings.embedding_matrix(cached.get_model(spec)), n_pairs, seed)


@st.cache_data(show_spinner=False, max_entries=16)
def embedding_rows(spec: str, ids: tuple[int, ...]) -> np.ndarray:
    """Rows of E for ``ids`` [n, d], read from the weight matrix itself (not from a trace)."""
    return embeddings.lookup(embeddings.embedding_matrix(cached.get_model(spec)), list(ids)).copy()


@st.cache_data(show_spinner=False, max_entries=16)
def pca_words(spec: str, words: tuple[str, ...]) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """(words, their pieces joined, coords [n, 2], explained [2]) for the PCA map."""
    loaded = cached.get_model(spec)
    vecs = embeddings.word_vectors(loaded, embeddings.embedding_matrix(loaded), list(words))
    if len(vecs) < 2:
        return [], [], np.zeros((0, 2)), np.zeros(2)
    p = embeddings.pca2(np.stack([v.vector for v in vecs]))
    return [v.word for v in vecs], [" + ".join(v.pieces) for v in vecs], p.coords, p.explained


@st.cache_data(show_spinner=False, max_entries=16)
def sources(spec: str, prompt: str, chat: bool) -> list[str]:
    tok = cached.get_model(spec).tokenizer
    enc = tracing.encode(tok, prompt, chat=chat)
    return embeddings.token_sources(tok, enc.text, prompt, enc.ids, chat)


@st.cache_data(show_spinner=False, max_entries=32)
def probs(spec: str, ids: tuple[int, ...], ablate: tuple[tuple[int, Any], ...]) -> np.ndarray:
    return ablation.next_token_probs(cached.get_model(spec), list(ids), list(ablate))


@st.cache_data(show_spinner=False, max_entries=8)
def layer_sweep(spec: str, ids: tuple[int, ...], layer: int) -> np.ndarray:
    """[H] KL(before ‖ after) for ablating each head of ``layer`` alone."""
    loaded = cached.get_model(spec)
    before = probs(spec, ids, ())
    after = ablation.sweep_heads(loaded, list(ids), [layer])[0]  # [H, V]
    return np.array([ablation.kl_divergence(before, a) for a in after])


@st.cache_data(show_spinner=False, max_entries=12)
def atlas(spec: str, prompt: str, chat: bool) -> heads.HeadAtlas:
    """Head metrics of the cached trace (computed once per prompt, not per slider move)."""
    return heads.head_atlas(cached.get_trace(spec, prompt, chat).attn_pattern)


@st.cache_data(show_spinner=False, max_entries=16)
def sentence_vector(spec: str, text: str) -> np.ndarray:
    """Mean-pooled final hidden state of ``text`` [d] (a crude sentence vector, for contrast only)."""
    tr = tracing.trace(cached.get_model(spec), text, max_tokens=128)
    return embeddings.mean_pooled(tr.final_hidden)


@st.cache_data(show_spinner=False, max_entries=4)
def model_sweep(spec: str, ids: tuple[int, ...]) -> np.ndarray:
    """[L, H] KL(before ‖ after) for ablating every head of every layer alone (batched passes)."""
    loaded = cached.get_model(spec)
    before = probs(spec, ids, ())
    after = ablation.sweep_heads(loaded, list(ids), list(range(loaded.facts.n_layers)))  # [L, H, V]
    return np.array([[ablation.kl_divergence(before, a) for a in row] for row in after])
