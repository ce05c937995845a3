"""Transformer X-Ray's core: everything the app computes, without the web page.

The notebook API (stable across refactors)::

    from core import load_model, trace
    m = load_model()                       # the embedded SmolLM2-135M-Instruct (or "toy", or a folder)
    tr = trace(m, "The capital of France is")
    tr.resid.shape                         # [layers + 1, T, d]: the residual stream, kept
    tr.attn_pattern.shape                  # [layers, heads, T, T]: every layer's attention, derived exactly on first read
    tr.attention(5).shape                  # [heads, T, T]: one layer (any length; = layer_detail(m, tr, 5).weights)

The house, from the bottom up (imports point down only; see README "Layout"):
``engine`` → ``toy`` → ``backends`` → ``gen`` · ``maths`` · ``inside`` · ``stream`` · ``learn`` → ``web``.
"""

from core.backends import export_npz, full_logits, layer_detail, load_model, trace
from core.engine.trace import Trace, load_npz
from core.engine.types import LoadedModel, ModelFacts

__all__ = ["LoadedModel", "ModelFacts", "Trace", "export_npz", "full_logits", "layer_detail", "load_model", "load_npz", "trace"]
