"""Run a Hugging Face model once and fill a Trace: capture → check → pack.

* **capture**: forward hooks scoped by a ``with`` block (``core.engine.hooks``) read the
  residual-stream sites, and the "xray" attention implementation (``core.engine.xray``) reads
  q/k/v/weights inside HF's own eager attention. Both ignore every thread but the one tracing, and
  the model's lock serialises forward passes, so many sessions share one model and each gets
  exactly the trace it would get alone.
* **check**: the record must be one residual chain whose blocks are "x + attn + mlp" (the trace
  contract's identity); anything else is refused with a reason rather than drawn wrongly.
* **pack**: tensors → the numpy ``Trace`` (batch dropped, float16 attention weights, top-K logits).

The toy model fills the same Trace through its own probes (``core.toy``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.engine import xray
from core.engine.hooks import HookSpec, scoped_hooks
from core.engine.roles import Sites, find_sites
from core.engine.tokens import readable_tokens
from core.engine.trace import TOP_K, Trace
from core.engine.types import LoadedModel, UnsupportedArchitectureError


@dataclass
class Capture:
    """What one forward pass left behind, as torch tensors with their batch dimension."""

    logits: torch.Tensor  # [1, T, V]
    calls: list[dict[str, Any]]  # one xray record per attention call
    per_layer: dict[str, dict[int, torch.Tensor]] = field(default_factory=dict)  # site → layer → [1, T, d]
    once: dict[str, torch.Tensor] = field(default_factory=dict)  # "embeddings" | "final_hidden" → [1, T, d]


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, (tuple, list)) else x


def _capture_hooks(sites: Sites, cap: Capture) -> list[HookSpec]:
    def put(site: str, i: int, val: torch.Tensor) -> None:
        cap.per_layer.setdefault(site, {})[i] = val.detach()

    def on_lm_head(_m: Any, args: tuple, kwargs: dict) -> None:
        cap.once["final_hidden"] = (args[0] if args else kwargs["input"]).detach()

    specs: list[HookSpec] = [
        (sites.embed, "forward", lambda _m, _a, out: cap.once.__setitem__("embeddings", _first(out).detach())),
        (sites.lm_head, "pre_kwargs", on_lm_head),
    ]
    for i, (b, a, m) in enumerate(zip(sites.blocks, sites.attns, sites.mlps)):
        specs += [
            (b, "pre_kwargs", lambda _m, args, kw, i=i: put("resid_pre", i, args[0] if args else kw["hidden_states"])),
            (b, "forward", lambda _m, _a, out, i=i: put("resid_post", i, _first(out))),
            (a, "forward", lambda _m, _a, out, i=i: put("attn_out", i, _first(out))),
            (m, "forward", lambda _m, _a, out, i=i: put("mlp_out", i, _first(out))),
        ]
    return specs


def capture(loaded: LoadedModel, ids: Sequence[int]) -> Capture:
    """One recorded forward pass (under the model's lock, hooks and recording scoped to it)."""
    sites = find_sites(loaded.model)
    input_ids = torch.tensor([list(ids)], dtype=torch.long)  # [1, T]
    with loaded.lock, torch.inference_mode(), xray.recording() as rec:
        cap = Capture(logits=torch.empty(0), calls=rec.calls)
        with scoped_hooks(_capture_hooks(sites, cap)):
            cap.logits = loaded.model(input_ids=input_ids, use_cache=False).logits
    return cap


def _stack(d: dict[int, torch.Tensor], n: int, what: str) -> torch.Tensor:
    if sorted(d) != list(range(n)):
        raise UnsupportedArchitectureError(f"{what} was not seen for every layer ({len(d)} of {n}).")
    return torch.stack([d[i][0] for i in range(n)])  # drop batch → [L, T, d]


def check(cap: Capture, n_layers: int, model_name: str) -> dict[str, torch.Tensor]:
    """The residual-stream sites as [L(+1), T, d] tensors, refused unless they form one
    pre-norm chain: resid[l+1] = resid[l] + attn_out[l] + mlp_out[l]."""
    L = n_layers
    if len(cap.calls) != L:
        raise UnsupportedArchitectureError(
            f"the attention of {model_name} did not go through transformers' attention interface "
            f"({len(cap.calls)} of {L} layers seen); its q/k/v and weights cannot be read faithfully."
        )
    pre, post = cap.per_layer.get("resid_pre", {}), cap.per_layer.get("resid_post", {})
    if sorted(post) != list(range(L)):
        raise UnsupportedArchitectureError(f"the residual stream leaving a block was not seen for every layer ({len(post)} of {L}).")
    for i in range(L - 1):  # the stream leaving block i must be exactly the one entering block i+1
        if i + 1 in pre and not (post[i] is pre[i + 1] or torch.equal(post[i], pre[i + 1])):
            raise UnsupportedArchitectureError("something sits between consecutive blocks; the residual stream is not one chain.")
    resid = torch.cat([_stack(pre, L, "the residual stream entering a block"), post[L - 1][:1]], dim=0)  # [L+1, T, d]
    attn_out = _stack(cap.per_layer.get("attn_out", {}), L, "the attention output")
    mlp_out = _stack(cap.per_layer.get("mlp_out", {}), L, "the MLP output")
    # in place: one temporary of [L, T, d]
    gap = torch.sub(resid[1:], resid[:-1]).sub_(attn_out).sub_(mlp_out).abs_().max().item()
    scale = max(1.0, resid.abs().max().item())  # float32 rounding grows with the stream's magnitude
    if gap > 1e-4 * scale:
        raise UnsupportedArchitectureError(
            f"the blocks of {model_name} are not pre-norm residual blocks "
            f"(resid[l+1] − resid[l] − attn_out − mlp_out reaches {gap:.3g}): e.g. post-norm or extra branch norms."
        )
    return {"resid": resid, "attn_out": attn_out, "mlp_out": mlp_out}


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu").float().numpy()


def pack(loaded: LoadedModel, ids: Sequence[int], cap: Capture, stream: dict[str, torch.Tensor], **what: Any) -> Trace:
    """Tensors → the numpy Trace of the contract (``what``: prompt, text, chat, truncated_from, notes)."""
    facts, calls = loaded.facts, cap.calls
    T, L = len(ids), facts.n_layers
    # One copy that also converts to float16 (torch does it multi-threaded; numpy's astype is
    # several times slower on the biggest array of the trace).
    w = torch.empty((L, facts.n_heads, T, T), dtype=torch.float16)  # [L, H, T, T]
    for layer, c in enumerate(calls):
        w[layer].copy_(c["weights"][0])
    logits = cap.logits[0]  # [T, V]
    top = torch.topk(logits, k=min(TOP_K, logits.shape[-1]), dim=-1)
    meta = {"model": facts.name, "model_kind": loaded.kind, "source": loaded.source, "facts": facts.to_dict(),
            "chat": bool(what.get("chat", False))}
    return Trace(
        prompt=what.get("prompt", ""),
        text=what.get("text", ""),
        chat=bool(what.get("chat", False)),
        tokens=np.asarray(readable_tokens(loaded.tokenizer, ids), dtype=object),
        token_ids=np.asarray(list(ids), dtype=np.int64),
        embeddings=_np(cap.once["embeddings"][0]),
        resid=_np(stream["resid"]),
        attn_out=_np(stream["attn_out"]),
        mlp_out=_np(stream["mlp_out"]),
        q=_np(torch.stack([c["query"][0] for c in calls])),  # [L, H, T, dh]
        k=_np(torch.stack([c["key"][0] for c in calls])),  # [L, Hkv, T, dh]
        v=_np(torch.stack([c["value"][0] for c in calls])),  # [L, Hkv, T, dh]
        attn_pattern=w.numpy(),
        final_hidden=_np(cap.once["final_hidden"][0]),
        last_logits=_np(logits[-1]),
        top_ids=top.indices.numpy().astype(np.int64),
        top_logits=_np(top.values),
        logsumexp=_np(torch.logsumexp(logits.float(), dim=-1)),
        meta=meta,
        truncated_from=what.get("truncated_from"),
        notes=list(what.get("notes") or []),
    )


def trace_ids(loaded: LoadedModel, ids: Sequence[int], **what: Any) -> Trace:
    """One recorded forward pass of an HF model on ``ids``: capture → check → pack."""
    cap = capture(loaded, ids)
    stream = check(cap, loaded.facts.n_layers, type(loaded.model).__name__)
    return pack(loaded, ids, cap, stream, **what)


def full_logits(loaded: LoadedModel, tr: Trace) -> np.ndarray:
    """The whole [T, V] logits matrix, recomputed from ``final_hidden`` by the LM head."""
    head = find_sites(loaded.model).lm_head
    with loaded.lock, torch.inference_mode():
        x = torch.from_numpy(np.ascontiguousarray(tr.final_hidden))[None]  # [1, T, d]
        return head(x)[0].float().numpy()
