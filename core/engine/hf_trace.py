"""Run a Hugging Face model once and fill a Trace: capture → check → pack; and derive one layer's
details later, exactly, by replaying that block (``layer_detail``).

* **capture**: forward hooks scoped by a ``with`` block (``core.engine.hooks``) copy the residual
  stream at every block boundary into one preallocated [L+1, T, d] buffer, take the norms of what
  each sub-layer added, and keep what each block was called with (mask, rotary cos/sin, position
  ids). The attention itself runs fast (SDPA, see ``core.engine.xray``): no weights are formed.
  Hooks and recording ignore every thread but the one tracing, and the model's lock serialises
  forward passes, so many sessions share one model and each gets exactly the trace it would get alone.
* **check**: the record must be one residual chain whose blocks are "x + attn + mlp" (the trace
  contract's identity), checked per block as the pass runs; anything else is refused with a reason
  rather than drawn wrongly.
* **pack**: tensors → the numpy ``Trace`` (batch dropped, top-K logits, the replay recipe).
* **layer_detail**: re-run block ``l`` alone on the kept ``resid[l]`` with its recorded arguments and
  HF's own eager attention (the model file's ``eager_attention_forward``, recording q/k/v/weights):
  the same function on the same inputs, so the same numbers as an eager forward. The block's output
  must reproduce the kept ``resid[l+1]``, or the replay is refused.

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
from core.engine.trace import TOP_K, LayerDetail, Trace
from core.engine.types import LoadedModel, UnsupportedArchitectureError

IDENTITY_RTOL = 1e-4  # resid[l+1] − resid[l] − attn_out − mlp_out, relative to the stream's magnitude
REPLAY_RTOL = 1e-3  # a replayed block (eager) vs the traced one (SDPA): float32 rounding of two kernels


# ---------------------------------------------------------------------------------------------
# the replay recipe: what a block was called with, besides its input, stored compactly


@dataclass
class Replay:
    """Per layer, the block's positional and keyword arguments with tensors encoded (``_encode``);
    tensors shared between layers (the mask, cos/sin) are stored once in ``tensors``."""

    calls: list[tuple[Any, Any]]  # per layer: (encoded args, encoded kwargs)
    tensors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for t in self.tensors for v in t.values() if isinstance(v, np.ndarray))

    def call(self, layer: int, hidden: torch.Tensor) -> tuple[tuple, dict]:
        """The block's (args, kwargs) again, with ``hidden`` as its input."""
        cache: dict[int, torch.Tensor] = {}
        args, kwargs = self.calls[layer]
        return tuple(_decode(a, hidden, self.tensors, cache) for a in args), {
            k: _decode(v, hidden, self.tensors, cache) for k, v in kwargs.items()}


def _encode_tensor(t: torch.Tensor) -> dict[str, Any]:
    """A mask-shaped tensor whose values are only 0 and one fill value (HF's additive mask) becomes
    bits; a boolean mask becomes bits; anything else is kept as it is."""
    t = t.detach()
    shape = tuple(t.shape)
    if t.dtype == torch.bool:
        return {"kind": "bits", "bits": np.packbits(t.numpy().ravel()), "shape": shape}
    if t.is_floating_point() and t.dim() == 4 and t.shape[-1] * t.shape[-2] >= 4096:
        fill = t.min()
        if bool(((t == 0) | (t == fill)).all()):
            return {"kind": "additive", "bits": np.packbits((t == 0).numpy().ravel()), "shape": shape,
                    "fill": float(fill), "dtype": str(t.dtype).replace("torch.", "")}
    return {"kind": "array", "array": t.clone().numpy()}


def _encode(obj: Any, hidden: torch.Tensor, tensors: list[dict[str, Any]], seen: dict[int, int]) -> Any:
    if obj is hidden:
        return ("hidden",)
    if isinstance(obj, torch.Tensor):
        if id(obj) not in seen:
            seen[id(obj)] = len(tensors)
            tensors.append(_encode_tensor(obj))
        return ("tensor", seen[id(obj)])
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return ("value", obj)
    if isinstance(obj, (tuple, list)):
        return ("seq", type(obj) is tuple, [_encode(x, hidden, tensors, seen) for x in obj])
    raise UnsupportedArchitectureError(
        f"a block of this model takes a {type(obj).__name__} argument, which the tracer cannot replay "
        "to derive a layer's attention exactly.")


def _decode(enc: Any, hidden: torch.Tensor, tensors: list[dict[str, Any]], cache: dict[int, torch.Tensor]) -> Any:
    kind = enc[0]
    if kind == "hidden":
        return hidden
    if kind == "value":
        return enc[1]
    if kind == "seq":
        items = [_decode(x, hidden, tensors, cache) for x in enc[2]]
        return tuple(items) if enc[1] else items
    i = enc[1]
    if i not in cache:
        t = tensors[i]
        if t["kind"] == "array":
            cache[i] = torch.from_numpy(t["array"].copy())
        else:
            n = int(np.prod(t["shape"]))
            bits = torch.from_numpy(np.unpackbits(t["bits"], count=n).astype(bool).reshape(t["shape"]))
            if t["kind"] == "bits":
                cache[i] = bits
            else:
                dtype = getattr(torch, t["dtype"])
                cache[i] = torch.where(bits, torch.tensor(0.0, dtype=dtype), torch.tensor(t["fill"], dtype=dtype))
    return cache[i]


# ---------------------------------------------------------------------------------------------
# capture + check


@dataclass
class Capture:
    """What one forward pass left behind (torch tensors, batch dropped)."""

    resid: torch.Tensor  # [L+1, T, d]
    attn_norm: torch.Tensor  # [L, T]
    mlp_norm: torch.Tensor  # [L, T]
    logits: torch.Tensor = field(default_factory=lambda: torch.empty(0))  # [1, T, V]
    calls: list[dict[str, Any]] = field(default_factory=list)  # one xray record per attention call
    block_calls: dict[int, tuple[tuple, dict]] = field(default_factory=dict)  # layer → (args, kwargs)
    seen: dict[str, set[int]] = field(default_factory=dict)  # site → layers seen
    once: dict[str, torch.Tensor] = field(default_factory=dict)  # "embeddings" | "final_hidden" → [T, d]
    problem: str | None = None  # the first broken identity, if any


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, (tuple, list)) else x


def _hidden_of(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _capture_hooks(sites: Sites, cap: Capture, model_name: str) -> list[HookSpec]:
    L = len(sites.blocks)
    pending: dict[str, torch.Tensor] = {}  # this block's input and sub-layer outputs, until it returns

    def mark(site: str, i: int) -> None:
        cap.seen.setdefault(site, set()).add(i)

    def on_block_in(i: int, args: tuple, kwargs: dict) -> None:
        x = _hidden_of(args, kwargs)
        if i > 0 and "prev_out" in pending and not (x is pending["prev_out"] or torch.equal(x, pending["prev_out"])):
            cap.problem = cap.problem or "something sits between consecutive blocks; the residual stream is not one chain."
        pending.clear()
        pending["in"] = x
        cap.resid[i].copy_(x[0])
        cap.block_calls[i] = (args, kwargs)
        mark("resid_pre", i)

    def on_sub(site: str, i: int, out: Any) -> None:
        y = _first(out)
        pending[site] = y
        (cap.attn_norm if site == "attn_out" else cap.mlp_norm)[i].copy_(torch.linalg.vector_norm(y[0], dim=-1))
        mark(site, i)

    def on_block_out(i: int, out: Any) -> None:
        y = _first(out)
        mark("resid_post", i)
        if i == L - 1:
            cap.resid[L].copy_(y[0])
        if "attn_out" in pending and "mlp_out" in pending and "in" in pending:
            # the trace contract's identity, per block: out = in + attn_out + mlp_out
            gap = torch.sub(y, pending["in"]).sub_(pending["attn_out"]).sub_(pending["mlp_out"]).abs_().max().item()
            scale = max(1.0, y.abs().max().item())  # float32 rounding grows with the stream's magnitude
            if gap > IDENTITY_RTOL * scale and cap.problem is None:
                cap.problem = (f"the blocks of {model_name} are not pre-norm residual blocks (resid[l+1] − resid[l] − "
                               f"attn_out − mlp_out reaches {gap:.3g}): e.g. post-norm or extra branch norms.")
        pending.clear()
        pending["prev_out"] = y

    def on_lm_head(_m: Any, args: tuple, kwargs: dict) -> None:
        cap.once["final_hidden"] = (args[0] if args else kwargs["input"]).detach()[0]

    specs: list[HookSpec] = [
        (sites.embed, "forward", lambda _m, _a, out: cap.once.__setitem__("embeddings", _first(out).detach()[0])),
        (sites.lm_head, "pre_kwargs", on_lm_head),
    ]
    for i, (b, a, m) in enumerate(zip(sites.blocks, sites.attns, sites.mlps)):
        specs += [
            (b, "pre_kwargs", lambda _m, args, kw, i=i: on_block_in(i, args, kw)),
            (b, "forward", lambda _m, _a, out, i=i: on_block_out(i, out)),
            (a, "forward", lambda _m, _a, out, i=i: on_sub("attn_out", i, out)),
            (m, "forward", lambda _m, _a, out, i=i: on_sub("mlp_out", i, out)),
        ]
    return specs


def capture(loaded: LoadedModel, ids: Sequence[int]) -> Capture:
    """One recorded forward pass (under the model's lock, hooks and recording scoped to it)."""
    sites = find_sites(loaded.model)
    L, T, d = len(sites.blocks), len(ids), loaded.facts.d_model
    input_ids = torch.tensor([list(ids)], dtype=torch.long)  # [1, T]
    cap = Capture(resid=torch.empty(L + 1, T, d), attn_norm=torch.zeros(L, T), mlp_norm=torch.zeros(L, T))
    with loaded.lock, torch.inference_mode(), xray.recording(keep_weights=False, last_row=True) as rec:
        cap.calls = rec.calls
        with scoped_hooks(_capture_hooks(sites, cap, type(loaded.model).__name__)):
            cap.logits = loaded.model(input_ids=input_ids, use_cache=False).logits
    return cap


def check(cap: Capture, n_layers: int, model_name: str) -> None:
    """Refuse a record that is not one pre-norm residual chain of ``n_layers`` blocks."""
    L = n_layers
    if len(cap.calls) != L:
        raise UnsupportedArchitectureError(
            f"the attention of {model_name} did not go through transformers' attention interface "
            f"({len(cap.calls)} of {L} layers seen); its q/k/v and weights cannot be read faithfully."
        )
    names = {"resid_pre": "the residual stream entering a block", "resid_post": "the residual stream leaving a block",
             "attn_out": "the attention output", "mlp_out": "the MLP output"}
    for site, what in names.items():
        n = len(cap.seen.get(site, ()))
        if n != L:
            raise UnsupportedArchitectureError(f"{what} was not seen for every layer ({n} of {L}).")
    if cap.problem:
        raise UnsupportedArchitectureError(cap.problem)


# ---------------------------------------------------------------------------------------------
# pack


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu").float().numpy()


def pack(loaded: LoadedModel, ids: Sequence[int], cap: Capture, **what: Any) -> Trace:
    """Tensors → the numpy Trace of the contract (``what``: prompt, text, chat, truncated_from, notes)."""
    facts = loaded.facts
    tensors: list[dict[str, Any]] = []
    seen: dict[int, int] = {}
    calls = []
    for i in range(facts.n_layers):
        args, kwargs = cap.block_calls[i]
        hidden = _hidden_of(args, kwargs)
        calls.append((tuple(_encode(a, hidden, tensors, seen) for a in args),
                      {k: _encode(v, hidden, tensors, seen) for k, v in kwargs.items()}))
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
        embeddings=_np(cap.once["embeddings"]),
        resid=cap.resid.numpy(),
        attn_out_norm=cap.attn_norm.numpy(),
        last_attn=_last_rows(cap.calls, facts.n_heads, len(ids)),
        mlp_out_norm=cap.mlp_norm.numpy(),
        final_hidden=_np(cap.once["final_hidden"]),
        last_logits=_np(logits[-1]),
        top_ids=top.indices.numpy().astype(np.int64),
        top_logits=_np(top.values),
        logsumexp=_np(torch.logsumexp(logits, dim=-1)),
        head_shape=(facts.n_heads, facts.n_kv_heads, facts.head_dim),
        kv_itemsize=int(cap.resid.element_size()),
        meta=meta,
        truncated_from=what.get("truncated_from"),
        notes=list(what.get("notes") or []),
        replay=Replay(calls, tensors),
    )


def _last_rows(calls: list[dict[str, Any]], n_heads: int, T: int) -> np.ndarray:
    """[L, H, T] the last query's weights in every layer (exact eager numbers, see xray's last_row)."""
    rows = [c.get("last_row") for c in calls]
    if any(r is None for r in rows):
        raise UnsupportedArchitectureError("the last position's attention could not be read in every layer.")
    return torch.stack([r[0, :, 0, :] for r in rows]).float().numpy().reshape(len(rows), n_heads, T)


def trace_ids(loaded: LoadedModel, ids: Sequence[int], **what: Any) -> Trace:
    """One recorded forward pass of an HF model on ``ids``: capture → check → pack."""
    cap = capture(loaded, ids)
    check(cap, loaded.facts.n_layers, type(loaded.model).__name__)
    return pack(loaded, ids, cap, **what)


# ---------------------------------------------------------------------------------------------
# derived on demand


def layer_detail(loaded: LoadedModel, tr: Trace, layer: int) -> LayerDetail:
    """Layer ``layer`` of ``tr`` in full, by replaying that one block with eager attention."""
    if tr.replay is None:
        raise UnsupportedArchitectureError("this trace keeps no replay recipe.")
    sites = find_sites(loaded.model)
    got: dict[str, torch.Tensor] = {}
    hooks: list[HookSpec] = [
        (sites.attns[layer], "forward", lambda _m, _a, out: got.__setitem__("attn_out", _first(out))),
        (sites.mlps[layer], "forward", lambda _m, _a, out: got.__setitem__("mlp_out", _first(out))),
    ]
    hidden = torch.from_numpy(np.array(tr.resid[layer]))[None]  # [1, T, d], a writable copy
    args, kwargs = tr.replay.call(layer, hidden)
    with loaded.lock, torch.inference_mode(), xray.recording(keep_weights=True) as rec, scoped_hooks(hooks):
        out = _first(sites.blocks[layer](*args, **kwargs))[0]  # [T, d]
        if len(rec.calls) != 1 or rec.calls[0]["weights"] is None:
            raise UnsupportedArchitectureError(f"replaying layer {layer} did not make exactly one eager attention call.")
        c = rec.calls[0]
        want = torch.from_numpy(tr.resid[layer + 1].copy())
        gap = (out - want).abs().max().item()
        if gap > REPLAY_RTOL * max(1.0, want.abs().max().item()):
            raise UnsupportedArchitectureError(
                f"replaying layer {layer} alone did not reproduce the traced residual stream (off by {gap:.3g}); "
                "its attention cannot be derived exactly.")
        w = torch.empty(c["weights"].shape[1:], dtype=torch.float16)
        w.copy_(c["weights"][0])  # [H, T, T], one multi-threaded converting copy
        return LayerDetail(layer, q=_np(c["query"][0]), k=_np(c["key"][0]), v=_np(c["value"][0]), weights=w.numpy(),
                           attn_out=_np(got["attn_out"][0]), mlp_out=_np(got["mlp_out"][0]))


def full_logits(loaded: LoadedModel, tr: Trace) -> np.ndarray:
    """The whole [T, V] logits matrix, recomputed from ``final_hidden`` by the LM head."""
    head = find_sites(loaded.model).lm_head
    with loaded.lock, torch.inference_mode():
        x = torch.from_numpy(np.array(tr.final_hidden))[None]  # [1, T, d]
        return head(x)[0].float().numpy()
