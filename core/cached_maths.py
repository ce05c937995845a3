"""Streamlit caches for the maths pages' expensive bits (everything else indexes the cached trace).

* the seeded "why scale" experiment and the attention timing (machine-dependent, measured once);
* per-layer computations on the real model's weights that a trace does not hold: the pre-RoPE
  queries (to show RoPE reproduces ``trace.q``) and the W_O recombination of the heads.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from core import attention, cached, positions

TIMING_LENGTHS = (128, 256, 512, 1024, 2048)


@st.cache_data(show_spinner=False, max_entries=4)
def scale_experiment(d_values: tuple[int, ...]) -> dict[str, np.ndarray]:
    return attention.scale_experiment(d_values)


@st.cache_data(show_spinner=False, max_entries=2)
def attention_timing(spec: str, lengths: tuple[int, ...] = TIMING_LENGTHS) -> dict[str, np.ndarray]:
    """Measured once per process; holds the model's lock so no forward pass runs meanwhile."""
    with cached.get_model(spec).lock:
        return attention.time_attention(lengths)


@st.cache_data(show_spinner=False, max_entries=16)
def rope_check(spec: str, prompt: str, chat: bool, layer: int) -> dict[str, np.ndarray]:
    """Pre-RoPE q of ``layer`` from the weights, RoPE applied by core.positions, and the gap to the
    traced (post-RoPE) q. Raises ValueError for models without Llama-style q_proj."""
    loaded = cached.get_model(spec)
    tr = cached.get_trace(spec, prompt, chat)
    raw = positions.pre_rope_q(loaded, tr.resid[layer], layer)  # [H, T, dh]
    theta = loaded.facts.rope_theta or 10000.0
    rotated = positions.rope_rotate(raw, np.arange(raw.shape[1]), theta)  # [H, T, dh]
    return {"raw": raw, "rotated": rotated, "max_diff": np.array(np.abs(rotated - tr.q[layer]).max())}


@st.cache_data(show_spinner=False, max_entries=16)
def recombine(spec: str, prompt: str, chat: bool, layer: int) -> dict[str, np.ndarray]:
    """Per-head outputs → concat → W_O for ``layer``, and the gap to the traced attn_out."""
    loaded = cached.get_model(spec)
    tr = cached.get_trace(spec, prompt, chat)
    attn = cached_sites_attn(loaded, layer)
    o = getattr(attn, "o_proj", None)
    if o is None:
        raise ValueError(f"{type(attn).__name__} has no o_proj")
    parts = attention.recombine_heads(tr.attn_pattern[layer], tr.v[layer], o.weight.detach().float().numpy())
    if getattr(o, "bias", None) is not None:  # Llama/SmolLM2 have none; some models do
        parts["out"] = parts["out"] + o.bias.detach().float().numpy()
    parts["max_diff"] = np.array(np.abs(parts["out"] - tr.attn_out[layer]).max())
    return parts


def cached_sites_attn(loaded, layer: int):
    from core.tracing import find_sites

    return find_sites(loaded.model).attns[layer]
