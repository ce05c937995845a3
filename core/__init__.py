"""Transformer X-Ray's core: everything the app computes, without the web page.

The notebook API (stable across refactors; ``help(core.<name>)`` for each)::

    import core
    from core import load_model, trace, next_tokens, logit_lens
    m = load_model()                       # the embedded SmolLM2-135M-Instruct (or "toy", or a local HF folder)
    tr = trace(m, "The capital of France is")
    tr.resid.shape                         # [layers + 1, T, d]: the residual stream, kept
    tr.attn_pattern.shape                  # [layers, heads, T, T]: every layer's attention, derived exactly on first read
    tr.site("attn_pattern", 5).shape       # [heads, T, T]: one layer (any length), through the one door to every site
    tr.site("gate_act", 5).shape           # [T, d_ff]: the MLP's gate activation, derived when asked by name
    nt = next_tokens(m, tr)                # the best next tokens at every position: nt.ids [T, K], nt.probs() [T, K]
    lens = logit_lens(m, tr, k=5)          # every layer's stream read by the LM head: lens.ids / lens.probs [L+1, T, 5]
    lens.at(tr.n_tokens - 1)[-1]           # [(token, probability), …] of the last layer: the model's own prediction

``load_model`` · ``trace`` · ``next_tokens`` · ``logit_lens`` · ``layer_detail`` · ``attention`` ·
``full_logits`` · ``encode_prompt`` · ``export_npz`` / ``load_npz``; the records ``Trace``, ``NextTokens``,
``LensTopK``, ``LayerDetail``, ``LoadedModel``, ``ModelFacts``. Run from the repository root, or after
``pip install -e .`` (or ``pip install .``) from a checkout, so that ``import core`` finds this package.

The layers of the house and what each may import: CONTRIBUTING.md ("What each floor may import");
tests/unit/test_layers.py checks them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"  # the one place the version is written (pyproject.toml reads it; CHANGELOG.md says what changed)

if TYPE_CHECKING:
    from core.backends import attention, encode_prompt, export_npz, full_logits, layer_detail, load_model, next_tokens, trace
    from core.engine.trace import LayerDetail, NextTokens, Trace, load_npz
    from core.engine.types import LoadedModel, ModelFacts
    from core.stream.lens import LensTopK

# Where each name of the API lives. They are imported on first use (PEP 562), so that a light entry point under
# ``core`` (``python -m core.web.offer``, ``make run``'s setting check) does not pay for torch and transformers.
_HOME = {
    **dict.fromkeys(("attention", "encode_prompt", "export_npz", "full_logits", "layer_detail", "load_model",
                     "next_tokens", "trace"), "core.backends"),
    **dict.fromkeys(("LayerDetail", "NextTokens", "Trace", "load_npz"), "core.engine.trace"),
    **dict.fromkeys(("LoadedModel", "ModelFacts"), "core.engine.types"),
    **dict.fromkeys(("LensTopK", "logit_lens_topk"), "core.stream.lens"),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found here from now on, without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def logit_lens(model: LoadedModel, tr: Trace, k: int = 5, lo: int = 0, hi: int | None = None) -> LensTopK:
    """The logit lens: every layer boundary's residual stream ``tr.resid[l]`` read as if it were the last
    (the model's final norm, then its LM head, then a softmax over the whole vocabulary), at positions
    lo … hi−1 (all by default; each position costs L+1 LM-head rows, so window a long prompt).

    Returns a ``LensTopK``: ``ids`` and ``probs`` [L+1, T', k], best first, ``tokens`` (each id decoded
    alone, spaces shown as ␣), and ``at(pos)``: per layer, the (token, probability) pairs. Row L reads the
    stream leaving the last block, so it is exactly the model's own next-token prediction. ``k=1`` is
    what the Residual page draws. A Hugging Face model only (the toy has its own page)."""
    return __getattr__("logit_lens_topk")(model, tr, k=k, lo=lo, hi=hi)


__all__ = ["LayerDetail", "LensTopK", "LoadedModel", "ModelFacts", "NextTokens", "Trace", "attention", "encode_prompt",
           "export_npz", "full_logits", "layer_detail", "load_model", "load_npz", "logit_lens", "next_tokens", "trace"]
