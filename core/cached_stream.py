"""Streamlit caches for the residual / logits / anatomy pages (the only Streamlit import of this area).

Each entry is keyed on (model spec, prompt, chat) — the same key as the cached trace — so moving a
slider on the page never recomputes it.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from core import anatomy, cached, lens, tracing


def shown(s: str) -> str:
    """Token text made visible: a newline or a leading space would otherwise print as nothing."""
    s = str(s)
    if s.startswith("⟨") and s.endswith("⟩"):  # already a byte label such as ⟨EF BC⟩
        return s
    return str(s).replace("\n", "⏎").replace("\t", "⇥").replace(" ", "␣") or "∅"


@st.cache_data(show_spinner=False, max_entries=8)
def get_lens(spec: str, prompt: str, chat: bool) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The logit lens of the cached trace: top ids [L+1, T], their probabilities, and their text."""
    loaded = cached.get_model(spec)
    tr = cached.get_trace(spec, prompt, chat)
    ids, probs = lens.logit_lens(loaded, tr)
    uniq = np.unique(ids)
    text = dict(zip(uniq.tolist(), map(shown, tracing.readable_tokens(loaded.tokenizer, uniq.tolist()))))
    return ids, probs, [text[i] for i in ids.ravel().tolist()]


@st.cache_data(show_spinner=False, max_entries=4)
def get_breakdown(spec: str) -> dict[str, int]:
    """Parameters per role of the loaded model (walks named_parameters once per model)."""
    return anatomy.param_breakdown(cached.get_model(spec).model)


@st.cache_data(show_spinner=False, max_entries=64)
def token_texts(spec: str, ids: tuple[int, ...]) -> list[str]:
    """Readable, visible text of a few token ids (the candidate tables)."""
    return [shown(s) for s in tracing.readable_tokens(cached.get_model(spec).tokenizer, list(ids))]
