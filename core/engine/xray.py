"""An attention implementation that *is* HF's eager attention, and can record what it sees.

Models are loaded with ``attn_implementation="xray"``. For every attention call, this function
hands the work to the model file's own ``eager_attention_forward`` (Llama's, Qwen2's, GPT-2's …),
so the numbers are exactly HF eager's. If, and only if, the current thread has opened a
``recording()`` block, it also keeps the inputs and the weights:

* ``query``  [B, H, Tq, dh]  — after RoPE (the model applies it before calling us)
* ``key``, ``value`` [B, Hkv, Tk, dh] — after the cache update: exactly what the KV cache holds
* ``weights`` [B, H, Tq, Tk] — after mask and softmax

Recording is keyed on the thread, so many browser sessions can share one model: nothing is stored
on the model, and another thread's forward pass never lands in your record.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

NAME = "xray"

_local = threading.local()
_registered = False


class AttentionRecord:
    """What one forward pass's attention calls saw, in call order, for one thread."""

    def __init__(self, keep_weights: bool = True) -> None:
        self.keep_weights = keep_weights
        self.calls: list[dict[str, Any]] = []


def _eager_for(module: Any) -> Callable:
    mod = sys.modules.get(type(module).__module__)
    fn = getattr(mod, "eager_attention_forward", None)
    if fn is None:
        raise RuntimeError(
            f"{type(module).__name__} has no eager_attention_forward in its modeling file: "
            "the tracer cannot follow this architecture's attention."
        )
    return fn


def xray_attention_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any):
    eager = _eager_for(module)
    out, weights = eager(module, query, key, value, attention_mask, **kwargs)
    rec: AttentionRecord | None = getattr(_local, "record", None)
    if rec is not None:
        rec.calls.append(
            {
                "layer": getattr(module, "layer_idx", None),
                "module": module,
                "query": query.detach(),
                "key": key.detach(),
                "value": value.detach(),
                "weights": weights.detach() if (weights is not None and rec.keep_weights) else None,
                "mask": attention_mask.detach() if attention_mask is not None else None,
            }
        )
    return out, weights


def register() -> None:
    """Register "xray" with transformers (attention and mask), once per process."""
    global _registered
    if _registered:
        return
    AttentionInterface.register(NAME, xray_attention_forward)
    # Eager's additive float mask (0 / -inf-like), so the weights match eager exactly.
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["eager"])
    _registered = True


@contextlib.contextmanager
def recording(keep_weights: bool = True) -> Iterator[AttentionRecord]:
    """Record the attention calls this thread makes inside the block; always cleared on exit."""
    prev = getattr(_local, "record", None)
    rec = AttentionRecord(keep_weights)
    _local.record = rec
    try:
        yield rec
    finally:
        _local.record = prev
