"""Run a Hugging Face model once and fill a Trace: capture → check → pack; and derive one layer's
details later, exactly, by replaying that block (``layer_detail``).

* **capture**: scoped forward hooks (``core.engine.hooks``) copy the residual stream at every block
  boundary into one [L+1, T, d] buffer, the norms of what each sub-layer adds, and each block's call
  arguments; attention runs fast (SDPA). Only the tracing thread is recorded and the model's lock
  serialises forward passes, so sessions share one model.
* **check**: each block must be "x + attn + mlp" (the trace contract's identity), or the trace is refused.
* **pack**: tensors → the numpy ``Trace``.
* **layer_detail**: block ``l`` re-run alone on the kept ``resid[l]`` with HF's eager attention
  (recording q/k/v/weights); its output must reproduce ``resid[l+1]``, or the replay is refused.

The toy model fills the same Trace through its own probes (``core.toy``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.engine import roles, xray
from core.engine.hooks import HookSpec, scoped_hooks
from core.engine.hooks import first_of as _first
from core.engine.hooks import hidden_of as _hidden_of
from core.engine.roles import Parts, find_sites
from core.engine.tokens import readable_tokens
from core.engine.trace import MAX_TOKENS, MLP_SITES, TOP_K, LayerDetail, NextTokens, Trace
from core.engine.types import LoadedModel, Phrase, UnsupportedArchitectureError

KV_KEEP_MAX = 1024  # a trace keeps its keys and values (``k``, ``v``: exactly the prefill's KV cache) up to this many
# tokens: 2·L·Hkv·T·dh floats, 47 MB for SmolLM2 at 1,024; the journey's loop then decodes without a second prefill.
# Above it (189 MB more at 4,096, past the trace's 400 MB bound) ``prompt_kv`` forms them again from ``resid``.
IDENTITY_RTOL = 1e-4  # resid[l+1] − resid[l] − attn_out − mlp_out, relative to the stream's magnitude
REPLAY_RTOL = 1e-3  # a replayed block (eager) vs the traced one (SDPA): float32 rounding of two kernels


# ---------------------------------------------------------------------------------------------
# the replay recipe: what a block was called with, besides its input, stored compactly


@dataclass
class Replay:
    """Per layer, the block's positional and keyword arguments with tensors encoded (``_encode``);
    tensors shared between layers (the mask, cos/sin) are stored once in ``tensors``."""

    calls: list[tuple[Any, Any]]  # per layer: the block's (encoded args, encoded kwargs)
    tensors: list[dict[str, Any]] = field(default_factory=list)
    # per layer: the attention module's (encoded args, encoded kwargs), its input being the normed stream
    attn_calls: list[tuple[Any, Any]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for t in self.tensors for v in t.values() if isinstance(v, np.ndarray))

    def call(self, layer: int, hidden: torch.Tensor, attention: bool = False,
             cache: dict[int, torch.Tensor] | None = None) -> tuple[tuple, dict]:
        """The block's (or, with ``attention``, its attention module's) (args, kwargs) again, with
        ``hidden`` as its input. ``cache``: tensors already decoded (by index: the mask and cos/sin that every
        layer shares), kept for the next call; a fresh one by default."""
        cache = {} if cache is None else cache
        args, kwargs = (self.attn_calls if attention else self.calls)[layer]
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


class _Hidden:
    """Stands for a call's input stream in a recorded call: the tensor itself is not kept (holding
    every block's input alive would keep the allocator from reusing its buffers, slowing the pass)."""


HIDDEN = _Hidden()


def _without_hidden(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    x = _hidden_of(args, kwargs)
    return (tuple(HIDDEN if a is x else a for a in args), {k: HIDDEN if v is x else v for k, v in kwargs.items()})


def _encode(obj: Any, hidden: Any, tensors: list[dict[str, Any]], seen: dict[int, int]) -> Any:
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
    raise UnsupportedArchitectureError("block_argument", kind=type(obj).__name__)


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
    attn_calls: dict[int, tuple[tuple, dict]] = field(default_factory=dict)  # layer → the attention's (args, kwargs)
    seen: dict[str, set[int]] = field(default_factory=dict)  # site → layers seen
    once: dict[str, torch.Tensor] = field(default_factory=dict)  # "embeddings" | "final_hidden" → [T, d]
    problem: UnsupportedArchitectureError | None = None  # the first broken identity, if any
    # the identity's sample: what attention [0] and the MLP [1] added at ``identity_rows`` positions, per layer
    sampled: torch.Tensor = field(default_factory=lambda: torch.empty(0))  # [2, L, rows, d]
    # sites kept whole (``capture_sites``: activation patching): registry name → layer → [T, ·] (batch row 0)
    keep: tuple[str, ...] = ()
    kept: dict[str, dict[int, torch.Tensor]] = field(default_factory=dict)
    # the prefill's keys and values [L, Hkv, T, dh], written by the attention calls (``xray``'s ``kv_into``);
    # None when not kept (above KV_KEEP_MAX) or when some layer's call did not fit its row
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    def stacked(self, site: str) -> torch.Tensor:
        """[L, T, ·] a kept site over every layer ("resid": the stream entering each block)."""
        if site == "resid":
            return self.resid[:-1]
        return torch.stack([self.kept[site][i] for i in range(len(self.kept[site]))])


def _new_capture(L: int, T: int, d: int, keep: tuple[str, ...] = ()) -> Capture:
    return Capture(resid=torch.empty(L + 1, T, d), attn_norm=torch.zeros(L, T),
                   mlp_norm=torch.zeros(L, T), sampled=torch.empty(2, L, len(range(T)[identity_rows(T)]), d),
                   keep=keep)




def identity_rows(T: int) -> slice:
    """The positions the contract's identity is checked on: 16 spread over the sequence (a block that is not
    "x + attn + mlp" breaks it at every one)."""
    return slice(None, None, max(1, T // 16))


def _capture_hooks(sites: Parts, cap: Capture, model_name: str, last_only: bool) -> list[HookSpec]:
    L = len(sites.blocks)
    pending: dict[str, torch.Tensor] = {}  # this block's input and sub-layer outputs, until it returns

    def mark(site: str, i: int) -> None:
        cap.seen.setdefault(site, set()).add(i)

    def store(site: str, i: int, v: torch.Tensor) -> None:  # a site kept whole (``cap.keep``)
        kept = cap.kept.setdefault(site, {})
        if i in kept:
            cap.problem = cap.problem or UnsupportedArchitectureError("ran_twice", layer=i, site=site)
        kept[i] = v.detach().clone()
        mark(site, i)

    def on_block_in(i: int, args: tuple, kwargs: dict) -> None:
        x = _hidden_of(args, kwargs)
        if i > 0 and not ("prev_out" in pending and (x is pending["prev_out"] or torch.equal(x, pending["prev_out"]))):
            cap.problem = cap.problem or UnsupportedArchitectureError("not_one_chain")
        pending.clear()
        cap.resid[i].copy_(x[0])
        cap.block_calls[i] = _without_hidden(args, kwargs)
        mark("resid", i)  # resid[i]: what block i is called with

    rows = identity_rows(cap.resid.shape[1])

    def on_sub(site: str, i: int, out: Any) -> None:
        y = _first(out)
        attn = site == "attn_out"
        # written in place (out=): the same bits, without a [T] temporary and its copy
        buf = (cap.attn_norm if attn else cap.mlp_norm)[i]
        torch.linalg.vector_norm(y[0], dim=-1, dtype=buf.dtype, out=buf)  # dtype: a model in another dtype still fits the buffer
        cap.sampled[0 if attn else 1, i].copy_(y[0, rows].detach())  # the identity is checked after the pass, all layers at once
        mark(site, i)
        if site in cap.keep:
            store(site, i, y[0])

    def on_attn(i: int, args: tuple, kwargs: dict, out: Any) -> None:
        # what the attention module was called with (the replay's recipe: the same objects after the call as before
        # it) and what it added, in one hook: one registration and one dispatch fewer per layer than two hooks
        cap.attn_calls[i] = _without_hidden(args, kwargs)
        on_sub("attn_out", i, out)

    def on_block_out(i: int, out: Any) -> None:
        y = _first(out)
        mark("resid", i + 1)  # resid[i + 1]: what block i returns (the next block must be called with it)
        if i == L - 1:
            cap.resid[L].copy_(y[0])
        pending.clear()
        pending["prev_out"] = y

    def on_lm_head(_m: Any, args: tuple, kwargs: dict) -> None:
        cap.once["final_hidden"] = (args[0] if args else kwargs["input"]).detach()[0]

    specs: list[HookSpec] = [
        (sites.embed, "forward", lambda _m, _a, out: cap.once.__setitem__("embeddings", _first(out).detach()[0])),
        # with only the last position's logits asked for, the LM head sees one row: read the final norm's output
        (sites.final_norm, "forward", lambda _m, _a, out: cap.once.__setitem__("final_hidden", _first(out).detach()[0]))
        if last_only else (sites.lm_head, "pre_kwargs", on_lm_head),
    ]
    for i, (b, a, m) in enumerate(zip(sites.blocks, sites.attns, sites.mlps)):
        specs += [
            (b, "pre_kwargs", lambda _m, args, kw, i=i: on_block_in(i, args, kw)),
            (b, "forward", lambda _m, _a, out, i=i: on_block_out(i, out)),
            (a, "forward_kwargs", lambda _m, args, kw, out, i=i: on_attn(i, args, kw, out)),
            (m, "forward", lambda _m, _a, out, i=i: on_sub("mlp_out", i, out)),
        ]
        if "z" in cap.keep:  # the heads' outputs side by side: the output projection's input
            specs.append((roles.out_proj(a), "pre", lambda _m, args, i=i: store("z", i, args[0][0])))
    return specs


# Per model class: does its LM head alone turn the final norm's output into the logits (no soft-cap,
# no scaling after it)? Then a trace asks the forward for the last position's logits only; the other
# positions' candidates are derived when asked (``next_tokens``: the head on rows of ``final_hidden``,
# band by band, never holding [T, V]). Learned on a class's first trace by comparing the last row both ways.
_HEAD_ALONE: dict[type, bool] = {}


def _last_only_possible(model: torch.nn.Module, sites: Parts) -> bool:
    return (_HEAD_ALONE.get(type(model), True) and sites.final_norm is not None
            and isinstance(sites.lm_head, torch.nn.Linear)
            and "logits_to_keep" in inspect.signature(type(model).forward).parameters)


def capture(loaded: LoadedModel, ids: Sequence[int]) -> Capture:
    """One recorded forward pass (under the model's lock, hooks and recording scoped to it)."""
    sites = find_sites(loaded.model)
    L, T, d = len(sites.blocks), len(ids), loaded.facts.d_model
    input_ids = torch.tensor([list(ids)], dtype=torch.long)  # [1, T]
    last_only = _last_only_possible(loaded.model, sites)
    cap = _new_capture(L, T, d)
    extra = {"logits_to_keep": 1} if last_only else {}
    f = loaded.facts
    kv = tuple(torch.empty(L, f.n_kv_heads, T, f.head_dim) for _ in "kv") if T <= KV_KEEP_MAX else None
    with loaded.lock, torch.inference_mode(), xray.recording(keep_weights=False, last_row=True, keep_kv=kv is not None,
                                                             kv_into=kv) as rec:
        cap.calls = rec.calls
        with scoped_hooks(_capture_hooks(sites, cap, type(loaded.model).__name__, last_only)):
            cap.logits = loaded.model(input_ids=input_ids, use_cache=False, **extra).logits
        if kv is not None and rec.kv_written == set(range(L)):
            cap.k, cap.v = kv
        if kv is not None:
            xray.last_rows_of(rec.calls, kv[0])  # the rows left for after the pass (written layers only)
        if last_only and type(loaded.model) not in _HEAD_ALONE:
            fh = cap.once.get("final_hidden")
            mine = sites.lm_head(fh[-1:]) if fh is not None and fh.shape[0] == T else None
            _HEAD_ALONE[type(loaded.model)] = mine is not None and torch.allclose(mine[0], cap.logits[0, -1], rtol=1e-5, atol=1e-5)
    if last_only and not _HEAD_ALONE[type(loaded.model)]:
        return capture(loaded, ids)  # this class post-processes its logits: trace it with all of them
    _check_identity(cap, type(loaded.model).__name__)
    return cap


def _check_identity(cap: Capture, model_name: str) -> None:
    """The trace contract's identity, every block at once after the pass: resid[l+1] = resid[l] + attn_out +
    mlp_out at ``identity_rows`` (resid[l] is what block l was called with, resid[l+1] what it returned:
    the chain check saw to it). Float32 rounding grows with the stream's magnitude: relative, floor 1."""
    sampled, cap.sampled = cap.sampled, torch.empty(0)  # read once here; its memory is then freed
    L = sampled.shape[1]
    if cap.problem is not None or len(cap.seen.get("resid", ())) != L + 1 or any(len(cap.seen.get(s, ())) != L for s in ("attn_out", "mlp_out")):
        return  # ``check`` refuses it already, with its own reason
    r = cap.resid[:, identity_rows(cap.resid.shape[1])]  # [L+1, rows, d]
    gap = (r[1:] - r[:-1] - sampled[0] - sampled[1]).abs_().flatten(1).amax(1)  # [L]
    scale = r[1:].abs().flatten(1).amax(1).clamp_(min=1.0)
    bad = (gap > IDENTITY_RTOL * scale).nonzero()
    if len(bad):
        worst = float(gap[int(bad[0, 0])])
        cap.problem = UnsupportedArchitectureError("not_pre_norm", model=model_name, gap=f"{worst:.3g}")


HEAD_BAND_BYTES = 2 * 2**20  # one tile of logits, summarised while it is still in the CPU's cache
HEAD_ROWS = 512  # positions per tile: the head's weight matrix is read once per this many positions


def _head_summary(head: Any, final_hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-K (values, ids) and log-sum-exp of the logits at every row of ``final_hidden``, tile by tile
    (positions × a band of the vocabulary) from the final norm's output with the LM head's own weight
    and bias — the same linear layer on the same rows as the forward — without forming [T, V]."""
    W, bias = head.weight, head.bias
    T, V = final_hidden.shape[0], W.shape[0]
    k = min(TOP_K, V)
    values, indices, lse = torch.empty(T, k), torch.empty(T, k, dtype=torch.long), torch.empty(T)
    with torch.inference_mode():
        for i in range(0, T, HEAD_ROWS):
            x = final_hidden[i:i + HEAD_ROWS]
            cols = max(256, HEAD_BAND_BYTES // (4 * x.shape[0]))
            vals, ids, lses = [], [], []
            for a in range(0, V, cols):
                band = torch.nn.functional.linear(x, W[a:a + cols], None if bias is None else bias[a:a + cols])
                tv, ti = torch.topk(band, k=min(k, band.shape[1]), dim=-1)
                vals.append(tv)
                ids.append(ti.add_(a))
                top = tv[:, :1]  # the band's maximum: log Σ exp(x) = m + log Σ exp(x − m), in place
                lses.append(band.sub_(top).exp_().sum(dim=-1).log_().add_(top[:, 0]))
            tv, pos = torch.topk(torch.cat(vals, dim=1), k=k, dim=-1)
            values[i:i + HEAD_ROWS], indices[i:i + HEAD_ROWS] = tv, torch.cat(ids, dim=1).gather(1, pos)
            lse[i:i + HEAD_ROWS] = torch.logsumexp(torch.stack(lses, dim=1), dim=-1)
    return values, indices, lse


def capture_sites(loaded: LoadedModel, forward: Callable[[], Any], n_tokens: int, keep: Sequence[str]) -> Capture:
    """The same capture for a caller that runs its own forward pass (activation patching: a batch of equal
    rows through ``core.backends.last_logits``, the toy's or an HF model's): ``forward()`` runs under the
    capture's hooks (its result is ``cap.logits``), batch row 0 of every registry site in ``keep`` (resid,
    attn_out, mlp_out, z) is kept whole (``cap.stacked(site)``), and the record is checked as a trace's is
    (``check``: one pre-norm residual chain, the same reasons). The caller holds ``loaded.lock`` and picks
    the grad mode."""
    sites = find_sites(loaded.model)
    cap = _new_capture(len(sites.blocks), n_tokens, loaded.facts.d_model, tuple(keep))
    with scoped_hooks(_capture_hooks(sites, cap, type(loaded.model).__name__, last_only=False)):
        cap.logits = forward()
    _check_identity(cap, type(loaded.model).__name__)
    check(cap, len(sites.blocks), type(loaded.model).__name__, attention=False)
    return cap


def check(cap: Capture, n_layers: int, model_name: str, attention: bool = True) -> None:
    """Refuse a record that is not one pre-norm residual chain of ``n_layers`` blocks (``attention``: whose
    every attention call went through the xray interface, as a trace's must)."""
    L = n_layers
    if attention and len(cap.calls) != L:
        raise UnsupportedArchitectureError("attention_interface", model=model_name, n=len(cap.calls), L=L)
    for site in ("resid", "attn_out", "mlp_out", *(("z",) if "z" in cap.keep else ())):
        n, want = len(cap.seen.get(site, ())), L + 1 if site == "resid" else L  # resid: every block boundary
        if n != want:  # what the site is, in the page's language: arch.site_<site>
            raise UnsupportedArchitectureError("site_unseen", site=Phrase(f"arch.site_{site}"), n=n, L=want)
    if cap.problem:
        raise cap.problem


# ---------------------------------------------------------------------------------------------
# pack


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu").float().numpy()


def pack(loaded: LoadedModel, ids: Sequence[int], cap: Capture, **what: Any) -> Trace:
    """Tensors → the numpy Trace of the contract (``what``: prompt, text, chat, truncated_from, notes, cut_by,
    kept_tail, max_tokens)."""
    facts = loaded.facts
    tensors: list[dict[str, Any]] = []
    seen: dict[int, int] = {}

    done: dict[tuple, tuple[tuple, dict]] = {}  # a call's arguments by identity → their encoding

    def encoded(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        # the layers of a model are mostly called with the very same objects (the mask, cos/sin, the cache position):
        # a call whose every argument *is* an earlier call's shares its encoding (the same value). The identities are
        # sound keys here: every recorded call keeps its objects alive until packing is done
        key = (tuple(map(id, args)), tuple((k, id(v)) for k, v in kwargs.items()))
        if key not in done:
            done[key] = (tuple(_encode(a, HIDDEN, tensors, seen) for a in args),
                         {k: _encode(v, HIDDEN, tensors, seen) for k, v in kwargs.items()})
        return done[key]

    calls = [encoded(*cap.block_calls[i]) for i in range(facts.n_layers)]
    try:  # the attention modules' own calls (mostly the block's tensors again, stored once)
        attn_calls = [encoded(*cap.attn_calls[i]) for i in range(facts.n_layers)]
    except (KeyError, UnsupportedArchitectureError):  # replays then run whole blocks
        attn_calls = []
    logits = cap.logits[0]  # [T, V], or [1, V] when the forward was asked for the last position only
    meta = {"model": facts.name, "model_kind": loaded.kind, "source": loaded.source, "facts": facts.to_dict(),
            "chat": bool(what.get("chat", False))}
    if what.get("truncated_from"):  # whose limit cut the prompt (``tokens.cut_notice``)
        meta.update(cut_by=what.get("cut_by"), kept_tail=what.get("kept_tail", False))
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
        head_shape=(facts.n_heads, facts.n_kv_heads, facts.head_dim),
        kv_itemsize=int(cap.resid.element_size()),
        meta=meta,
        truncated_from=what.get("truncated_from"),
        notes=list(what.get("notes") or []),
        model_spec=loaded.spec,
        max_tokens=int(what.get("max_tokens", MAX_TOKENS)),
        replay=Replay(calls, tensors, attn_calls),
        k=cap.k.numpy() if cap.k is not None else _kept(cap.calls, "key"),
        v=cap.v.numpy() if cap.v is not None else _kept(cap.calls, "value"),
    )


def _kept(calls: list[dict[str, Any]], name: str) -> np.ndarray | None:
    """[L, Hkv, T, dh] every layer's keys (after RoPE) or values, as the KV cache holds them; None if not kept."""
    if not calls or any(c.get(name) is None for c in calls):
        return None
    return torch.stack([c[name][0] for c in calls]).float().numpy()


def _last_rows(calls: list[dict[str, Any]], n_heads: int, T: int) -> np.ndarray:
    """[L, H, T] the last query's weights in every layer (the formula the pass evaluated, in float32: xray's ``_last_row``)."""
    rows = [c.get("last_row") for c in calls]
    if any(r is None for r in rows):
        raise UnsupportedArchitectureError("last_row_unread")
    return torch.stack([r[0, :, 0, :] for r in rows]).float().numpy().reshape(len(rows), n_heads, T)


def trace_ids(loaded: LoadedModel, ids: Sequence[int], **what: Any) -> Trace:
    """One recorded forward pass of an HF model on ``ids``: capture → check → pack."""
    cap = capture(loaded, ids)
    check(cap, loaded.facts.n_layers, type(loaded.model).__name__)
    return pack(loaded, ids, cap, **what)


# ---------------------------------------------------------------------------------------------
# derived on demand


def layer_detail(loaded: LoadedModel, tr: Trace, layer: int) -> LayerDetail:
    """Layer ``layer`` of ``tr`` in full, by replaying that one layer's attention (or, where that is not
    possible, its whole block) with eager attention."""
    if tr.replay is None:
        raise UnsupportedArchitectureError("no_replay")
    sites = find_sites(loaded.model)
    if tr.replay.attn_calls and sites.attn_norms[layer] is not None:
        return _attention_replay(loaded, sites, tr, layer)[0]
    return _block_replay(loaded, sites, tr, layer)[0]


def mlp_sites(loaded: LoadedModel, tr: Trace, layer: int) -> dict[str, np.ndarray]:
    """Layer ``layer``'s MLP sites (``MLP_SITES`` whose part its MLP has), [T, ·] each: its MLP replayed on the
    replayed attention's middle stream (``mlp_replay``), or the whole block replayed with the MLP's hooks."""
    if tr.replay is None:
        raise UnsupportedArchitectureError("no_replay")
    sites = find_sites(loaded.model)
    if tr.replay.attn_calls and sites.attn_norms[layer] is not None and sites.mlp_norms[layer] is not None:
        attn_out = _attention_replay(loaded, sites, tr, layer)[1]
        inside = mlp_replay(loaded, tr, layer, attn_out)[1]
    else:
        inside = _block_replay(loaded, sites, tr, layer, mlp=True)[1]
    return {k: _np(v[0]) for k, v in inside.items()}


def prompt_kv(loaded: LoadedModel, tr: Trace) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Every layer's keys and values of ``tr``'s prompt ([1, Hkv, T, dh] each, exactly the prefill's KV
    cache) for a trace that did not keep them (above ``KV_KEEP_MAX`` tokens): each layer's attention module
    is called again on its norm of the kept ``resid[l]`` with its recorded arguments — the same functions on
    the same inputs as in the traced pass — and stopped as soon as its keys and values are formed
    (``xray.recording(kv_only=True)``): the projections and the rotation only, no attention, no MLP (about a
    tenth of a forward pass at 3,000 tokens, where a second prefill is a whole one). None where the trace
    keeps no attention recipe (the caller then runs the prefill)."""
    if tr.replay is None or not tr.replay.attn_calls:
        return None
    sites = find_sites(loaded.model)
    if any(n is None for n in sites.attn_norms):
        return None
    kv: list[tuple[torch.Tensor, torch.Tensor]] = []
    dtype = next(loaded.model.parameters()).dtype
    decoded: dict[int, torch.Tensor] = {}  # the mask (bits → [1, 1, T, T] floats) and cos/sin decoded once, not per layer
    with loaded.lock, torch.inference_mode():
        for layer in range(tr.n_layers):
            hidden = torch.from_numpy(np.array(tr.resid[layer])).to(dtype)[None]  # [1, T, d], a writable copy
            with xray.recording(keep_weights=False, kv_only=True) as rec:
                args, kwargs = tr.replay.call(layer, sites.attn_norms[layer](hidden), attention=True, cache=decoded)
                with contextlib.suppress(xray.KVTaken):  # raised once the keys and values are formed
                    sites.attns[layer](*args, **kwargs)
            if len(rec.calls) != 1:
                return None
            kv.append((rec.calls[0]["key"], rec.calls[0]["value"]))
    return kv


def _eager_call(rec: xray.AttentionRecord, layer: int) -> dict[str, Any]:
    if len(rec.calls) != 1 or rec.calls[0]["weights"] is None:
        raise UnsupportedArchitectureError("replay_calls", layer=layer)
    return rec.calls[0]


def _detail(layer: int, c: dict[str, Any], attn_out: torch.Tensor, mlp_out: torch.Tensor) -> LayerDetail:
    w = c["weights"][0].to(torch.float16)  # [H, T, T]; already float16 when computed in bands
    return LayerDetail(layer, q=_np(c["query"][0]), k=_np(c["key"][0]), v=_np(c["value"][0]), attn_pattern=w.numpy(),
                       attn_out=_np(attn_out), mlp_out=_np(mlp_out))


def _mlp_hooks(sites: Parts, layer: int, got: dict[str, torch.Tensor]) -> list[HookSpec]:
    """Forward hooks that record every MLP site of the registry (``MLP_SITES``) whose part this layer's MLP
    has (``roles.MLP_PARTS``), [1, T, ·] each, into ``got``."""
    parts = {name: roles.mlp_part(sites.mlps[layer], name) for name in MLP_SITES}
    return [(m, "forward", lambda _m, _a, out, name=name: got.__setitem__(name, _first(out).detach()))
            for name, m in parts.items() if m is not None]


def mlp_replay(loaded: LoadedModel, tr: Trace, layer: int, attn_out: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Layer ``layer``'s MLP alone, the way its attention is replayed: its norm on the block's middle stream
    ``resid[l] + attn_out`` (the block's own addition; ``attn_out`` [T, d] as replayed), then the MLP, its
    parts recorded (``_mlp_hooks``). Returns (what it adds [T, d], MLP site → [1, T, ·]). What it adds must be
    the rest of the block's step, ``resid[l+1] − resid[l] − attn_out``, or the replay is refused."""
    sites = find_sites(loaded.model)
    norm = sites.block_norm(layer, "mlp")
    got: dict[str, torch.Tensor] = {}
    mid = torch.from_numpy(np.array(tr.resid[layer]))[None] + attn_out[None]  # [1, T, d]
    with loaded.lock, torch.inference_mode(), scoped_hooks(_mlp_hooks(sites, layer, got)):
        out = _first(sites.mlps[layer](norm(mid)))[0]  # [T, d]
    rest = torch.from_numpy(tr.resid[layer + 1] - tr.resid[layer]) - attn_out
    gap = (out - rest).abs().max().item()
    if gap > REPLAY_RTOL * max(1.0, rest.abs().max().item()):
        raise UnsupportedArchitectureError("mlp_replay_off", layer=layer, gap=f"{gap:.3g}")
    return out, got


def _attention_replay(loaded: LoadedModel, sites: Parts, tr: Trace, layer: int) -> tuple[LayerDetail, torch.Tensor]:
    """The attention sub-layer alone: its norm on ``resid[l]``, then the attention module with its
    recorded arguments. What it adds must have, at every position, the norm the trace kept
    (``attn_out_norm``); the MLP's contribution is then the rest of the block's step,
    ``resid[l+1] − resid[l] − attn_out`` (the contract identity, checked during the forward)."""
    hidden = torch.from_numpy(np.array(tr.resid[layer]))[None]  # [1, T, d], a writable copy
    with loaded.lock, torch.inference_mode(), xray.recording(keep_weights=True, weights_dtype=torch.float16) as rec:
        x = sites.attn_norms[layer](hidden)
        args, kwargs = tr.replay.call(layer, x, attention=True)
        attn_out = _first(sites.attns[layer](*args, **kwargs))[0]  # [T, d]
        c = _eager_call(rec, layer)
    want = tr.attn_out_norm[layer]
    got = torch.linalg.vector_norm(attn_out, dim=-1).numpy()
    gap = float(np.abs(got - want).max())
    if gap > REPLAY_RTOL * max(1.0, float(want.max())):
        raise UnsupportedArchitectureError("attn_replay_off", layer=layer, gap=f"{gap:.3g}")
    mlp_out = torch.from_numpy(tr.resid[layer + 1] - tr.resid[layer]) - attn_out
    return _detail(layer, c, attn_out, mlp_out), attn_out


def _block_replay(loaded: LoadedModel, sites: Parts, tr: Trace, layer: int,
                  mlp: bool = False) -> tuple[LayerDetail, dict[str, torch.Tensor]]:
    """The whole block ``layer`` on ``resid[l]`` with its recorded arguments (``mlp``: its MLP sites recorded
    too); its output must reproduce the kept ``resid[l+1]``."""
    got: dict[str, torch.Tensor] = {}
    inside: dict[str, torch.Tensor] = {}
    hooks: list[HookSpec] = [
        (sites.attns[layer], "forward", lambda _m, _a, out: got.__setitem__("attn_out", _first(out))),
        (sites.mlps[layer], "forward", lambda _m, _a, out: got.__setitem__("mlp_out", _first(out))),
        *(_mlp_hooks(sites, layer, inside) if mlp else []),
    ]
    hidden = torch.from_numpy(np.array(tr.resid[layer]))[None]  # [1, T, d], a writable copy
    args, kwargs = tr.replay.call(layer, hidden)
    with loaded.lock, torch.inference_mode(), xray.recording(keep_weights=True, weights_dtype=torch.float16) as rec, \
            scoped_hooks(hooks):
        out = _first(sites.blocks[layer](*args, **kwargs))[0]  # [T, d]
        c = _eager_call(rec, layer)
    want = torch.from_numpy(tr.resid[layer + 1].copy())
    gap = (out - want).abs().max().item()
    if gap > REPLAY_RTOL * max(1.0, want.abs().max().item()):
        raise UnsupportedArchitectureError("layer_replay_off", layer=layer, gap=f"{gap:.3g}")
    return _detail(layer, c, got["attn_out"][0], got["mlp_out"][0]), inside


def _head_reproduces(loaded: LoadedModel, tr: Trace) -> bool:
    """Whether the LM head alone, on ``final_hidden``, gives the traced logits (no scale or soft-cap
    after it): known per class from its first trace, else checked on the last position."""
    known = _HEAD_ALONE.get(type(loaded.model))
    if known is not None:
        return known
    head = find_sites(loaded.model).lm_head
    with loaded.lock, torch.inference_mode():
        mine = head(torch.from_numpy(np.array(tr.final_hidden[-1:])))[0].float()
    last = torch.from_numpy(np.array(tr.last_logits))
    return bool(torch.allclose(mine, last, rtol=1e-5, atol=1e-5 * max(1.0, float(last.abs().max()))))


def full_logits(loaded: LoadedModel, tr: Trace) -> np.ndarray:
    """The whole [T, V] logits matrix, recomputed from ``final_hidden`` by the LM head — or, for a
    model that post-processes the head's output (a logit scale or soft-cap: its last row then differs
    from the traced ``last_logits``), by running the model's forward on the trace's ids again."""
    with loaded.lock, torch.inference_mode():
        if _head_reproduces(loaded, tr):
            out = find_sites(loaded.model).lm_head(torch.from_numpy(np.array(tr.final_hidden))[None])[0]
        else:
            out = loaded.model(input_ids=torch.tensor([tr.token_ids.tolist()]), use_cache=False).logits[0]
        return out.float().numpy()


def logits_row(loaded: LoadedModel, tr: Trace, t: int) -> np.ndarray:
    """Row ``t`` of the logits, [V] float32: the LM head on that one row of ``final_hidden`` (the same linear layer
    on the same row as the forward; not [T, V] for one row), or that row of ``full_logits`` for a model that
    post-processes its head."""
    if not _head_reproduces(loaded, tr):
        return full_logits(loaded, tr)[t]
    with loaded.lock, torch.inference_mode():
        return _np(find_sites(loaded.model).lm_head(torch.from_numpy(np.array(tr.final_hidden[t:t + 1])))[0])


def next_tokens(loaded: LoadedModel, tr: Trace, positions: Sequence[int]) -> NextTokens:
    """The top-K next tokens and the log-sum-exp of the logits at ``positions``: the LM head on those
    rows of ``final_hidden``, tile by tile (``_head_summary``, no [n, V] matrix), or rows of
    ``full_logits`` for a model that post-processes its head."""
    pos = np.asarray(positions, dtype=np.int64)
    if not _head_reproduces(loaded, tr):
        return NextTokens.of_logits(pos, full_logits(loaded, tr)[pos])
    x = torch.from_numpy(np.ascontiguousarray(tr.final_hidden[pos]))
    with loaded.lock:
        values, ids, lse = _head_summary(find_sites(loaded.model).lm_head, x)
    return NextTokens(pos, ids.numpy().astype(np.int64), _np(values), _np(lse))
