"""Streamlit caches for the generation pages (the one place in this area that imports Streamlit).

Timings are measured once per (model, prompt, settings) and kept: moving a slider that only
chooses what to look at never runs the model again.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from core import cached, generate, tracing


@st.cache_data(show_spinner=False, max_entries=8)
def compare_cache(spec: str, prompt: str, chat: bool, n: int, min_len: int = 0) -> dict[str, Any]:
    """The same ``n`` greedy tokens with and without the KV cache, timed per token; the prompt is
    repeated up to ``min_len`` tokens so that the prefix the no-cache run recomputes is long."""
    loaded = cached.get_model(spec)
    enc = tracing.encode(loaded.tokenizer, prompt, chat=chat, max_tokens=generate.MAX_PROMPT_TOKENS)
    ids = generate.extend_ids(enc.ids, min_len, max_len=min(generate.MAX_PROMPT_TOKENS, _room(loaded, n)))
    generate.run_with_cache(loaded, ids[:8], 2)  # warm-up, so the first timed pass is not penalised
    with_c = generate.run_with_cache(loaded, ids, n)
    without = generate.run_without_cache(loaded, ids, n)
    T = len(ids)
    return {
        "n_prompt": T,
        "with_ids": list(with_c.generated),
        "with_tokens": [r.token for r in with_c.records],
        "with_seconds": [r.seconds for r in with_c.records],
        # pass i of the cached run feeds T tokens (i = 0) or 1 token, at sequence length T + i
        "with_lengths": [T + i for i in range(len(with_c.records))],
        "without_ids": list(without.token_ids),
        "without_tokens": tracing.readable_tokens(loaded.tokenizer, without.token_ids),
        "without_seconds": list(without.seconds),
        "without_lengths": list(without.lengths),
    }


def _room(loaded: Any, n: int) -> int:
    """Prompt tokens that still leave room for ``n`` new ones in the context window."""
    return max(1, int(loaded.facts.max_positions or 1 << 30) - n)


@st.cache_data(show_spinner=False, max_entries=4)
def measured_costs(spec: str) -> dict[str, float]:
    """Prefill seconds per prompt token and decode seconds per new token on this model, here."""
    loaded = cached.get_model(spec)
    n_prefill = min(128, max(8, int(loaded.facts.max_positions or 128) - 16))
    pre, dec = generate.measure_costs(loaded, n_prefill=n_prefill, n_decode=8)
    return {"prefill_s_per_token": pre, "decode_s_per_token": dec, "n_prefill": n_prefill}


@st.cache_resource(show_spinner=False, max_entries=4)
def warmed_up(spec: str) -> bool:
    """One tiny cached generation per model and process: the very first forward pass pays one-off
    start-up costs (memory pools, kernel selection) that would otherwise inflate the first TTFT shown."""
    generate.warm_up(cached.get_model(spec))
    return True
