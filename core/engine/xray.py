"""An attention implementation that *is* HF's eager attention, and can record what it sees.

Models are loaded with ``attn_implementation="xray"``. Each call goes to the model file's own
``eager_attention_forward``, so the numbers are HF eager's; inside a ``recording()`` block of the current
thread it also keeps ``query`` [B, H, Tq, dh] (after RoPE), ``key`` / ``value`` [B, Hkv, Tk, dh] (after
the cache update) and ``weights`` [B, H, Tq, Tk]. Recording is keyed on the thread, so sessions share one model.

Only a call whose weights are wanted runs eager attention; every other call runs transformers'
``sdpa_attention_forward`` (where the HF class supports SDPA and there is no soft-cap), with a plain
causal mask handed over as ``is_causal`` so the fused kernel runs.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

NAME = "xray"

_local = threading.local()
_registered = False
_FAST: set[type] = set()  # attention module classes whose model declares SDPA support


class AttentionRecord:
    """What one forward pass's attention calls saw, in call order, for one thread.

    ``keep_weights``: run eager and keep q, k, v and the weights of every call; without it the calls
    run fast (SDPA where allowed) and only their count and settings are kept (``calls[i]["kwargs"]``)."""

    def __init__(self, keep_weights: bool = True, last_row: bool = False, weights_dtype: torch.dtype | None = None,
                 keep_kv: bool = False, kv_only: bool = False,
                 kv_into: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        self.keep_weights = keep_weights
        # keep the call's key and value, then stop the module there (``KVTaken``): its keys and values
        # without the attention itself (``core.engine.hf_trace.prompt_kv``)
        self.kv_only = kv_only
        # the fast path keeps each call's key and value too (references, no copy): a prefill's KV cache
        self.keep_kv = keep_kv
        # (keys, values) [L, Hkv, T, dh]: the fast path copies each layer's key and value into row ``layer_idx``
        # and keeps no reference (a reference would keep the model's own buffer, so the next layer's comes from
        # memory never touched; a trace's prefill cache is then one array per site, not 2·L small ones)
        self.kv_into = kv_into
        self.kv_written: set[int] = set()
        self.last_row = last_row
        # set (e.g. float16): the weights are computed in bands of query rows (``_eager_in_bands``) and
        # kept in this dtype; None: one eager call, weights kept as eager returns them
        self.weights_dtype = weights_dtype
        self.calls: list[dict[str, Any]] = []


class KVTaken(Exception):  # not an error: a kv_only recording stops the module here
    """Raised by an attention call inside ``recording(kv_only=True)`` once its key and value are kept."""


def allow_fast(model: torch.nn.Module) -> None:
    """Let calls that keep no weights run SDPA for this model's attention modules, if its HF class
    declares SDPA support (HF then guarantees SDPA computes what eager computes)."""
    if not getattr(model, "_supports_sdpa", False):
        return
    for m in model.modules():
        if hasattr(m, "layer_idx") and any(n in ("q_proj", "c_attn", "qkv_proj") for n, _ in m.named_children()):
            _FAST.add(type(m))


def _causal_or_none(mask: torch.Tensor | None, q_len: int, k_len: int) -> torch.Tensor | None:
    """The mask to hand SDPA: None when ``mask`` is exactly causal (q_len == k_len) or masks nothing
    for one query row; otherwise the mask itself. The verdict is memoised per mask tensor and thread
    (one forward pass hands the same mask object to every layer)."""
    if mask is None or mask.dim() != 4 or mask.shape[0] != 1 or not mask.is_floating_point():
        return mask
    memo = getattr(_local, "mask_memo", None)  # (weak reference to the mask, verdict); masks are never edited in place
    if memo is not None and memo[0]() is mask:
        return memo[1]
    allowed = mask[0, 0] == 0  # [Tq, Tk]
    if q_len == k_len and q_len > 1:
        simple = bool(torch.equal(allowed, torch.ones(q_len, k_len, dtype=torch.bool).tril_()))
    elif q_len == 1:
        simple = bool(allowed.all())
    else:
        simple = False
    out = None if simple else mask
    _local.mask_memo = (weakref.ref(mask), out)
    return out


def _eager_for(module: torch.nn.Module) -> Callable:
    mod = sys.modules.get(type(module).__module__)
    fn = getattr(mod, "eager_attention_forward", None)
    if fn is None:
        raise RuntimeError(
            f"{type(module).__name__} has no eager_attention_forward in its modeling file: "
            "the tracer cannot follow this architecture's attention."
        )
    return fn


BAND_BYTES = 16 * 2**20  # the scores of one band of query rows: small enough to be reused by the allocator


def _last_live_column(mask: torch.Tensor) -> int:
    """1 + the last key column that some row of ``mask`` [B, 1|H, rows, Tk] does not mask out, or Tk
    when a row is masked entirely (eager's answer for such a row involves every column)."""
    if mask.dtype == torch.bool:
        live = mask
    else:
        live = mask > torch.finfo(mask.dtype).min / 2 if mask.is_floating_point() else mask != 0
    live_rows = live.flatten(0, 1).any(0)  # [rows, Tk]
    if not bool(live_rows.any(-1).all()):
        return mask.shape[-1]
    cols = live_rows.any(0).nonzero()
    return int(cols.max()) + 1


def _eager_in_bands(eager: Callable, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    mask: torch.Tensor | None, dtype: torch.dtype, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own eager attention, called on bands of query rows, each with the key columns
    that band can see (a causal band of rows i … j-1 sees columns 0 … j-1; the rest are exactly 0
    after softmax, since masked scores sit at the dtype's minimum). Every row is computed by the same
    function from the same numbers as in one full call; the bands only spare the [H, T, T] temporaries
    and the masked half of the work. Returns (output [B, Tq, H, dh], weights [B, H, Tq, Tk] in ``dtype``)."""
    B, H, Tq, _ = query.shape
    Tk = key.shape[2]
    rows = max(16, BAND_BYTES // max(1, H * Tk * 4))
    # numpy's zeros come from calloc: fresh zero pages, touched only where a band writes (the masked
    # triangle of a causal map stays untouched, costing neither time nor resident memory)
    weights = torch.from_numpy(np.zeros((B, H, Tq, Tk), dtype=torch.empty(0, dtype=dtype).numpy().dtype))
    outs = []
    for i in range(0, Tq, rows):
        j = min(Tq, i + rows)
        m = mask[:, :, i:j, :] if mask is not None else None
        kc = Tk if m is None else _last_live_column(m)
        if m is not None:
            m = m[..., :kc]
        out, w = eager(module, query[:, :, i:j], key[:, :, :kc], value[:, :, :kc], m, **kwargs)
        weights[:, :, i:j, :kc].copy_(w)
        outs.append(out)
    return torch.cat(outs, dim=1), weights


def _last_row(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
              unmasked: bool, **kwargs: Any) -> torch.Tensor:
    """The last query's weights [B, H, 1, Tk] in float32: softmax(q·kᵀ·scaling + mask), the formula the fast
    path's SDPA call evaluated (its ``scaling``, 1/√dh when None; grouped keys read in place, query head h on
    key head h // (H/Hkv), as ``repeat_kv`` lays them out), written out for one row.

    When the last row masks nothing (``unmasked``: the causal triangle's last row, or a lone query that sees
    everything), the mask is left out: adding its zeros changes no score. A call with attention sinks or a
    position bias (terms beyond that formula) is handed to the model's own eager function instead."""
    if not _plain_formula(kwargs):
        m = None if unmasked or mask is None else mask[:, :, -1:, :]
        _, w = _eager_for(module)(module, query[:, :, -1:, :], key, value, m, **kwargs)
        return w.detach()
    B, H, _, dh = query.shape
    Hkv, Tk = key.shape[1], key.shape[2]
    scaling = kwargs.get("scaling")
    q = query[:, :, -1, :].reshape(B, Hkv, H // Hkv, dh)
    s = (torch.matmul(q, key.transpose(-1, -2)) * (dh ** -0.5 if scaling is None else scaling)).reshape(B, H, 1, Tk)
    if not unmasked and mask is not None:
        m = mask[:, :, -1:, :Tk]
        s = s.masked_fill(~m, torch.finfo(s.dtype).min) if m.dtype == torch.bool else s + m
    return torch.softmax(s, dim=-1, dtype=torch.float32)


def _plain_formula(kwargs: dict[str, Any]) -> bool:
    """No term beyond softmax(q·kᵀ·scaling + mask): no attention sinks, no position bias (soft-capped calls
    never reach the fast path)."""
    return kwargs.get("sinks") is None and kwargs.get("s_aux") is None and kwargs.get("position_bias") is None


def last_rows_of(calls: list[dict[str, Any]], keys: torch.Tensor) -> None:
    """Fill in ``last_row`` for every call that left its query row (``last_query``) instead: the same formula
    as ``_last_row``'s, for all of them in one batched product against ``keys`` [L, Hkv, T, dh] (what
    ``kv_into`` holds after the pass), row ``layer`` for each call's layer."""
    todo = [c for c in calls if c.get("last_row") is None and c.get("last_query") is not None]
    if not todo:
        return
    layers = [c["layer"] for c in todo]
    k = keys if layers == list(range(keys.shape[0])) else keys[layers]  # [n, Hkv, T, dh]
    q = torch.cat([c["last_query"] for c in todo])  # [n, H, 1, dh]
    n, H, _, dh = q.shape
    Hkv, T = k.shape[1], k.shape[2]
    scale = torch.tensor([dh ** -0.5 if c["kwargs"].get("scaling") is None else c["kwargs"]["scaling"] for c in todo],
                         dtype=q.dtype).view(n, 1, 1, 1)
    s = (torch.matmul(q.view(n, Hkv, H // Hkv, dh), k.transpose(-1, -2)) * scale).view(n, H, 1, T)
    w = torch.softmax(s, dim=-1, dtype=torch.float32)
    for j, c in enumerate(todo):
        c["last_row"], c["last_query"] = w[j:j + 1], None


def _write_kv(rec: AttentionRecord, layer: Any, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Copy one call's key and value into ``rec.kv_into`` at row ``layer``; False (nothing written) when the
    call does not fit a row once (no layer index, a shape other than the buffer's, a layer seen before)."""
    keys, values = rec.kv_into  # type: ignore[misc]
    if (not isinstance(layer, int) or not 0 <= layer < keys.shape[0] or layer in rec.kv_written
            or key.shape[0] != 1 or key.shape[1:] != keys.shape[1:] or value.shape[1:] != values.shape[1:]):
        return False
    keys[layer].copy_(key[0])
    values[layer].copy_(value[0])
    rec.kv_written.add(layer)
    return True


def _scalars(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is None or isinstance(v, (bool, int, float, str))}


def xray_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs: Any):
    rec: AttentionRecord | None = getattr(_local, "record", None)
    if rec is not None and rec.kv_only:
        rec.calls.append({"layer": getattr(module, "layer_idx", None), "key": key.detach(), "value": value.detach()})
        raise KVTaken
    wants_weights = rec is not None and rec.keep_weights
    if not wants_weights and type(module) in _FAST and kwargs.get("softcap") is None:
        mask = _causal_or_none(attention_mask, query.shape[2], key.shape[2])
        out, _ = sdpa_attention_forward(module, query, key, value, mask, **kwargs)
        if rec is not None:
            layer = getattr(module, "layer_idx", None)
            keep = rec.keep_kv
            written = rec.kv_into is not None and _write_kv(rec, layer, key, value)
            if written:
                keep = False
            last = last_query = None
            if rec.last_row and written and mask is None and _plain_formula(kwargs) \
                    and isinstance(kwargs.get("scaling"), (int, float, type(None))):
                # its keys are in ``kv_into`` now: every such layer's row is computed at once after the pass
                # (``last_rows_of``), from this query row
                last_query = query[:, :, -1:, :].detach().clone()
            elif rec.last_row:
                last = _last_row(module, query, key, value, attention_mask, mask is None, **kwargs)
            rec.calls.append({"layer": layer, "module": module, "kwargs": _scalars(kwargs),
                              "query": None, "key": key.detach() if keep else None,
                              "value": value.detach() if keep else None, "weights": None, "mask": None, "last_row": last,
                              "last_query": last_query})
        return out, None
    eager = _eager_for(module)
    if rec is not None and rec.weights_dtype is not None and kwargs.get("sinks") is None and kwargs.get("s_aux") is None:
        out, weights = _eager_in_bands(eager, module, query, key, value, attention_mask, rec.weights_dtype, **kwargs)
    else:
        out, weights = eager(module, query, key, value, attention_mask, **kwargs)
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
                "kwargs": _scalars(kwargs),
                "last_row": weights[:, :, -1:, :].detach() if (weights is not None and rec.last_row) else None,
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
def recording(keep_weights: bool = True, last_row: bool = False, weights_dtype: torch.dtype | None = None,
              keep_kv: bool = False, kv_only: bool = False,
              kv_into: tuple[torch.Tensor, torch.Tensor] | None = None) -> Iterator[AttentionRecord]:
    """Record the attention calls this thread makes inside the block; always cleared on exit."""
    prev = getattr(_local, "record", None)
    rec = AttentionRecord(keep_weights, last_row, weights_dtype, keep_kv, kv_only, kv_into)
    _local.record = rec
    try:
        yield rec
    finally:
        _local.record = prev
