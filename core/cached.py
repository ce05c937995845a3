"""The one place where Streamlit's caches wrap core/ (the rest of core/ never imports Streamlit).

* the model: ``st.cache_resource`` — one object shared by every session;
* traces: ``st.cache_data`` — keyed on (model, prompt, settings), bounded in entries; a page that
  only changes what it *looks at* (layer, head, colour) reads the cached trace and never runs
  the model again.
"""

from __future__ import annotations

import streamlit as st

from core import tracing
from core.models import LoadedModel, load_model
from core.trace import Trace

MAX_TRACES = 8  # ≤ 1 GB at 256 tokens on SmolLM2 (≈ 120 MB each), ≤ 2.5 GB at 512; older entries are evicted


@st.cache_resource(show_spinner=False, max_entries=4)
def get_model(spec: str) -> LoadedModel:
    bar = st.progress(0.0, text="Loading model …")

    def progress(frac: float, msg: str) -> None:
        bar.progress(min(max(frac, 0.0), 1.0), text=msg)

    try:
        return load_model(spec or None, progress=progress)
    finally:
        bar.empty()


@st.cache_data(show_spinner=False, max_entries=MAX_TRACES)
def get_trace(spec: str, prompt: str, chat: bool, max_tokens: int = tracing.MAX_TOKENS) -> Trace:
    return tracing.trace(get_model(spec), prompt, chat=chat, max_tokens=max_tokens)


@st.cache_data(show_spinner=False, max_entries=MAX_TRACES)
def get_trace_npz(spec: str, prompt: str, chat: bool, max_tokens: int = tracing.MAX_TOKENS) -> bytes:
    loaded = get_model(spec)
    return tracing.export_npz_bytes(loaded, get_trace(spec, prompt, chat, max_tokens))


@st.cache_data(show_spinner=False, max_entries=32)
def get_continuation(spec: str, prompt: str, chat: bool, max_new: int = 24) -> tuple[list[int], bool]:
    """The greedy answer the journey page shows (ids, stopped at an end token)."""
    from core.journey import greedy_continuation

    tr = get_trace(spec, prompt, chat)
    return greedy_continuation(get_model(spec), tr.token_ids.tolist(), max_new)
