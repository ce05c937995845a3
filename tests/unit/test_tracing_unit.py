"""The trace contract, checked against independent references: HF's own eager model (loaded
separately, no xray: ``conftest.eager_refs``), its KV cache and hidden states, and hand recomputation
from traced q/k.

The trace's forward runs SDPA and HF's reference runs eager attention, so from layer 1 on the two streams
differ by rounding: there each comparison is held to float32's error (``floats``). Layer 0 reads the same
embeddings by the same functions, so there the trace's k, v and weights are HF's bit for bit."""

from __future__ import annotations

import pytest
import torch

from core import backends
from core.engine.types import UnsupportedArchitectureError


def _save_tiny(cfg, cls, folder):
    from transformers import AutoTokenizer

    from core.engine.hf import converted_dir, embedded_gguf_path

    tok = AutoTokenizer.from_pretrained(str(converted_dir(embedded_gguf_path())))
    torch.manual_seed(0)
    cls(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


def test_unsupported_architectures_are_refused_with_a_reason(tmp_path):
    """Gemma-2 normalises each branch before adding it (resid[l+1] ≠ resid[l] + attn + mlp), and
    OPT's blocks have no mlp sub-module: both are refused, naming why, never drawn wrongly."""
    from transformers import Gemma2Config, Gemma2ForCausalLM, OPTConfig, OPTForCausalLM

    from core.backends import load_model

    g = Gemma2Config(vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, architectures=["Gemma2ForCausalLM"])
    loaded = load_model(str(_save_tiny(g, Gemma2ForCausalLM, tmp_path / "gemma2")))
    with pytest.raises(UnsupportedArchitectureError, match="not pre-norm residual"):
        backends.trace(loaded, "hello world")
    o = OPTConfig(vocab_size=49152, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
                  word_embed_proj_dim=32, architectures=["OPTForCausalLM"])
    loaded = load_model(str(_save_tiny(o, OPTForCausalLM, tmp_path / "opt")))
    with pytest.raises(UnsupportedArchitectureError, match=r"no attention .* or MLP"):
        backends.trace(loaded, "hello world")
    for mod in loaded.model.modules():  # a refused trace leaves nothing behind either
        assert not mod._forward_hooks and not mod._forward_pre_hooks
