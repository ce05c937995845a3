"""The one place that tells the toy from a Hugging Face model.

Everything above this module (generation, the pages' areas, the web layer) asks here to load a
model, trace a prompt, recompute the full logits, or run one forward step of generation, and never
checks ``loaded.kind`` itself. Below it, ``core.engine`` (HF) and ``core.toy`` each know only
their own kind.
"""

from __future__ import annotations

import inspect
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch
from torch import nn
from transformers import DynamicCache

from core.common.progress import Progress, noop
from core.engine import hf, hf_trace, roles, xray
from core.engine.tokens import Encoded, encode
from core.engine.trace import LAYER_SITES, MAX_TOKENS, MLP_SITES, PATTERN_EXPORT_MAX, LayerDetail, NextTokens, Trace
from core.engine.types import EMBEDDED_ID, TOY_ID, LoadedModel
from core.toy import run as toy_run

# How many traced forward passes this process has run: tests use it to prove that choosing what
# to look at (a layer, a head, a colour) reads the cached trace and never runs the model again.
FORWARD_PASSES = 0


# ---------------------------------------------------------------------------------------------
# loading


def load_model(spec: str | None = None, progress: Progress = noop) -> LoadedModel:
    """Load a model for the app.

    ``None`` (or ``"SmolLM2-135M-Instruct"``) → the embedded SmolLM2; ``"toy"`` → the trained toy
    transformer from ``assets/``; anything else → a local folder or an id already in the HF cache.
    Raises ``ModelLoadError`` with a message fit for the page.
    """
    spec = (spec or "").strip()
    if spec in ("", EMBEDDED_ID):
        return hf.load_embedded(progress or noop)
    if spec == TOY_ID:
        return toy_run.load_trained(progress=progress or noop)
    return hf.load_local(spec, progress or noop)


def is_hf(loaded: LoadedModel) -> bool:
    """Whether the model is a Hugging Face transformers model. The views that read its weights through
    that API (the embedding matrix, head ablation, the RoPE check) need it; the toy has its own pages."""
    return not loaded.is_toy


# ---------------------------------------------------------------------------------------------
# tracing


def _count() -> None:
    global FORWARD_PASSES
    FORWARD_PASSES += 1


def encode_prompt(loaded: LoadedModel, prompt: str, *, chat: bool = False, max_tokens: int = MAX_TOKENS) -> Encoded:
    """``prompt`` as ``loaded``'s ids, cut at the app's ``max_tokens`` or at the model's own positions when
    it has fewer (GPT-2: 1,024): the one way every prompt meets a model (trace, generation, pairs, CLI)."""
    return encode(loaded.tokenizer, prompt, chat=chat, max_tokens=max_tokens, max_positions=loaded.facts.max_positions)


def trace(loaded: LoadedModel, prompt: str, *, chat: bool = False, max_tokens: int = MAX_TOKENS) -> Trace:
    """One forward pass of ``loaded`` on ``prompt``, recorded. See ``core.engine.trace.Trace``. A prompt
    longer than ``max_tokens`` or than the model's positions is cut (``tr.truncated_from``, ``tr.notes``)."""
    if loaded.is_toy:
        _count()
        return _knowing(loaded, toy_run.trace_toy(loaded, prompt, chat=chat, max_tokens=max_tokens))
    enc = encode_prompt(loaded, prompt, chat=chat, max_tokens=max_tokens)
    return trace_ids(loaded, enc.ids, prompt=prompt, text=enc.text, chat=chat, truncated_from=enc.truncated_from,
                     notes=list(enc.notes), cut_by=enc.cut_by, kept_tail=enc.kept_tail, max_tokens=max_tokens)


def trace_ids(loaded: LoadedModel, ids: Sequence[int], **what: Any) -> Trace:
    """A traced forward pass of an HF model on token ids (``what``: ``hf_trace.pack``'s)."""
    _count()
    return _knowing(loaded, hf_trace.trace_ids(loaded, ids, **what))


def _knowing(loaded: LoadedModel, tr: Trace) -> Trace:
    """``tr``, told how to derive a site it does not keep (``tr.site(name, layer)``): through ``layer_detail``
    and ``mlp_sites``, with a weak reference to the model, so that a cached trace never keeps a model alive
    that the app has let go."""
    model = weakref.ref(loaded)

    def alive() -> LoadedModel:
        m = model()
        if m is None:
            raise RuntimeError("the model this trace came from is no longer loaded: load it again and call "
                               "core.layer_detail(model, trace, layer)")
        return m

    tr.derive_with(lambda t, layer: layer_detail(alive(), t, layer), lambda t, layer: mlp_sites(alive(), t, layer))
    return tr


def full_logits(loaded: LoadedModel, tr: Trace) -> np.ndarray:
    """The whole [T, V] logits matrix, recomputed from ``final_hidden`` by the LM head."""
    return toy_run.full_logits(loaded, tr) if loaded.is_toy else hf_trace.full_logits(loaded, tr)


def logits_row(loaded: LoadedModel, tr: Trace, t: int) -> np.ndarray:
    """Row ``t`` of the logits [V] float32, without the whole matrix where the LM head alone makes them (HF)."""
    return toy_run.full_logits(loaded, tr)[t] if loaded.is_toy else hf_trace.logits_row(loaded, tr, t)


LOGPROB_CHUNK = 256  # positions whose logits exist at once in ``next_token_logprob`` (256 × 49,152 × 8 B = 96 MiB)


@dataclass(frozen=True)
class NextLogprob:
    """What the model said of each real next token of a text: position t = 0 … T−2 predicts ids[t + 1]."""

    logp: np.ndarray  # [T−1] float64: log p(ids[t + 1] | ids[0 … t]); −mean is the text's training loss
    rank: np.ndarray | None  # [T−1] int64: how many tokens score strictly higher than the real one (0 = the favourite)
    top1: np.ndarray | None  # [T−1] int64: the model's own favourite next token at t


def next_token_logprob(loaded: LoadedModel, tr: Trace, *, chunk: int = LOGPROB_CHUNK, ranks: bool = False) -> NextLogprob:
    """Per-position log p(next token) of ``tr``'s text, measured by the model's LM head on the trace's
    ``final_hidden``, ``chunk`` positions at a time, so the [T, V] logits never exist at once; the
    log-softmax in float64 on the float32 logits. With ``ranks``, the real token's rank and the favourite
    too, read off the same float32 rows. (An HF model that post-processes its head's output — a logit
    scale or soft-cap — takes its rows from ``full_logits``, which runs its forward again: only there the
    whole matrix exists.)"""
    ids = np.asarray(tr.token_ids, dtype=np.int64)
    if ids.size < 2:
        raise ValueError("next-token labels need at least two tokens")
    n, chunk = ids.size - 1, max(1, int(chunk))
    whole = None if loaded.is_toy or hf_trace._head_reproduces(loaded, tr) else full_logits(loaded, tr)
    head = loaded.model.lm_head if loaded.is_toy else roles.find_sites(loaded.model).lm_head
    tgt = torch.from_numpy(ids[1:].copy())
    logp = np.empty(n, dtype=np.float64)
    rank, top1 = (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)) if ranks else (None, None)
    with loaded.lock, torch.inference_mode():
        for a in range(0, n, chunk):
            b = min(a + chunk, n)
            if whole is None:
                z = head(torch.from_numpy(np.array(tr.final_hidden[a:b], dtype=np.float32))).float()  # [c, V], a copy in
            else:
                z = torch.from_numpy(whole[a:b])
            lab = tgt[a:b, None]
            z64 = z.double()
            logp[a:b] = (z64.gather(1, lab)[:, 0] - torch.logsumexp(z64, dim=1)).numpy()
            if ranks:
                rank[a:b] = (z > z.gather(1, lab)).sum(dim=1).numpy()
                top1[a:b] = z.argmax(dim=1).numpy()
    return NextLogprob(logp, rank, top1)


def next_tokens(loaded: LoadedModel, tr: Trace, positions: Sequence[int] | None = None) -> NextTokens:
    """The best next tokens (top-K logits and the log-sum-exp, so their probabilities are exact) at
    ``positions`` of ``tr`` (default: every position), derived from ``final_hidden`` by the LM head."""
    pos = np.arange(tr.n_tokens) if positions is None else np.asarray(positions, dtype=np.int64)
    if pos.size and not (pos.min() >= 0 and pos.max() < tr.n_tokens):
        raise IndexError(f"positions must lie in 0 … {tr.n_tokens - 1}")
    if loaded.is_toy:
        return NextTokens.of_logits(pos, toy_run.full_logits(loaded, tr)[pos])
    return hf_trace.next_tokens(loaded, tr, pos)


def export_npz(loaded: LoadedModel, tr: Trace, path: str | Path | BinaryIO) -> None:
    """Write ``tr`` as an ``.npz`` file (the README's table of keys: every contract site, the full logits, the
    facts as JSON under ``meta``), every layer derived for it; ``core.load_npz`` reads it back."""
    tr.to_npz(path, logits=full_logits(loaded, tr), layers=stacked_layers(loaded, tr))


def export_npz_bytes(loaded: LoadedModel, tr: Trace, detail: Callable[[int], LayerDetail] | None = None) -> bytes:
    """The .npz file in memory; ``detail(layer)`` supplies each layer (default ``layer_detail``: a
    caller that caches derived layers passes its own, so they are not derived twice)."""
    return tr.to_npz_bytes(logits=full_logits(loaded, tr), layers=stacked_layers(loaded, tr, detail=detail))


# ---------------------------------------------------------------------------------------------
# one layer of a trace, in detail: the ONE accessor every page uses for q, k, v, the attention
# weights and the two sub-layer outputs (see core.engine.trace: they may be derived on demand)


def layer_detail(loaded: LoadedModel, tr: Trace, layer: int) -> LayerDetail:
    """Everything layer ``layer`` computed for ``tr``: q, k, v, the attention weights (float16) and the
    two sub-layer outputs (``LAYER_SITES``). The toy keeps them in the trace; for an HF model they are
    derived exactly by replaying that one block (``core.engine.hf_trace.layer_detail``). Callers cache the
    result (``core.web.cache.site``): at 4,096 tokens one layer's weights are 0.3 GB."""
    if not 0 <= layer < tr.n_layers:
        raise IndexError(f"layer {layer} is outside 0 … {tr.n_layers - 1}")
    if tr.keeps("attn_pattern"):  # kept eagerly (the toy): slices of the trace
        return LayerDetail(layer, **{k: tr.site(k, layer) for k in LAYER_SITES})
    return hf_trace.layer_detail(loaded, tr, layer)


def mlp_sites(loaded: LoadedModel, tr: Trace, layer: int) -> dict[str, np.ndarray]:
    """Layer ``layer``'s MLP sites (``MLP_SITES`` whose part its MLP has), [T, ·] each: kept by the toy,
    derived for an HF model by replaying that layer's MLP (``core.engine.hf_trace.mlp_sites``)."""
    if not 0 <= layer < tr.n_layers:
        raise IndexError(f"layer {layer} is outside 0 … {tr.n_layers - 1}")
    if tr.keeps("attn_pattern"):
        return {k: tr.kept_sites[k][layer] for k in MLP_SITES if k in tr.kept_sites}
    return hf_trace.mlp_sites(loaded, tr, layer)


def attention(loaded: LoadedModel, tr: Trace, layer: int) -> np.ndarray:
    """[H, T, T] float32 attention weights of one layer (after mask and softmax)."""
    return layer_detail(loaded, tr, layer).attn_pattern.astype(np.float32)


def stacked_layers(loaded: LoadedModel, tr: Trace, with_pattern: bool | None = None,
                   detail: Callable[[int], LayerDetail] | None = None) -> dict[str, np.ndarray]:
    """Every layer's details stacked [L, …] under the contract's keys (the .npz export). The weights
    are included up to ``PATTERN_EXPORT_MAX`` tokens unless ``with_pattern`` says otherwise."""
    if with_pattern is None:
        with_pattern = tr.n_tokens <= PATTERN_EXPORT_MAX
    parts: dict[str, list[np.ndarray]] = {k: [] for k in LAYER_SITES if with_pattern or k != "attn_pattern"}
    for layer in range(tr.n_layers):
        d = layer_detail(loaded, tr, layer) if detail is None else detail(layer)
        for k in parts:
            parts[k].append(getattr(d, k))
    return {k: np.stack(v) for k, v in parts.items()}


# ---------------------------------------------------------------------------------------------
# one forward step of generation (prefill, decode, or a no-cache pass)


@dataclass
class Step:
    last_logits: np.ndarray  # [V] float32: scores for the next token
    attn: torch.Tensor | None  # [L, H, Tnew, Tk]: the fed tokens' attention over the cache, if recorded
    cache: Any  # the updated KV cache (HF DynamicCache, or the toy's list of (K, V)); None without cache
    seconds: float  # wall time of the forward pass, inside the lock (not the wait for another session)


_PARAMS: dict[type, frozenset[str]] = {}


def _forward_params(model: nn.Module) -> frozenset[str]:
    key = type(model)
    if key not in _PARAMS:
        _PARAMS[key] = frozenset(inspect.signature(model.forward).parameters)
    return _PARAMS[key]


def _hf_kwargs(model: nn.Module, cache: Any) -> dict[str, Any]:
    """transformers 5.x names the cache argument ``cache`` (``past_key_values`` is deprecated), and
    ``logits_to_keep=1`` computes the LM head for the last position only, as HF ``generate`` does."""
    params = _forward_params(model)
    kw: dict[str, Any] = {}
    if cache is not None:
        kw["cache" if "cache" in params else "past_key_values"] = cache
    if "logits_to_keep" in params:
        kw["logits_to_keep"] = 1
    return kw


def _toy_forward(loaded: LoadedModel, x: torch.Tensor, cache: Any, use_cache: bool, record: bool) -> tuple[torch.Tensor, Any, Any]:
    probes: dict[str, Any] | None = {} if record else None
    logits, new_cache = loaded.model(x, past_kv=cache, use_cache=use_cache, probes=probes)
    # the toy's own probes: per layer weights [H, Tnew, Tk] → [L, H, Tnew, Tk]
    attn = torch.stack([p["attn_pattern"] for p in probes["layers"]]) if probes else None
    return logits, new_cache, attn


def _hf_forward(loaded: LoadedModel, x: torch.Tensor, cache: Any, use_cache: bool, record: bool) -> tuple[torch.Tensor, Any, Any]:
    if use_cache and cache is None:
        cache = DynamicCache(config=loaded.model.config)
    kw = _hf_kwargs(loaded.model, cache if use_cache else None)
    if not record:
        return loaded.model(input_ids=x, use_cache=use_cache, **kw).logits, cache, None
    with xray.recording() as rec:
        out = loaded.model(input_ids=x, use_cache=use_cache, **kw)
    ok = rec.calls and rec.calls[0]["weights"] is not None
    attn = torch.stack([c["weights"][0] for c in rec.calls]) if ok else None  # per layer [1, H, Tnew, Tk] → [L, H, Tnew, Tk]
    # the DynamicCache was updated in place: it stays the caller's, never stored on the model
    return out.logits, cache, attn


def forward_step(loaded: LoadedModel, new_ids: Sequence[int], cache: Any = None, *, use_cache: bool = True,
                 record_attention: bool = False) -> Step:
    """Feed ``new_ids`` after what ``cache`` holds (nothing, for a prefill or a no-cache pass)."""
    x = torch.tensor([list(new_ids)], dtype=torch.long)  # [1, Tnew]
    run = _toy_forward if loaded.is_toy else _hf_forward
    with loaded.lock, torch.inference_mode():
        t0 = time.perf_counter()
        logits, cache, attn = run(loaded, x, cache, use_cache, record_attention)
        last = logits[0, -1].float().numpy()  # [V]
        seconds = time.perf_counter() - t0
    return Step(last, attn, cache if use_cache else None, seconds)


def context_room(loaded: LoadedModel) -> int:
    """How many tokens, prompt included, the model's positions allow (a model that states none: no limit)."""
    n = int(loaded.facts.max_positions or 0)
    return n if n > 0 else 1 << 30


def stop_reason(loaded: LoadedModel, token: int, n_new: int, n_total: int, max_new: int, *,
                stop_at_eos: bool = True) -> str | None:
    """Why generation stops after choosing ``token`` (the ``n_new``-th new token, ``n_total`` tokens in
    all), or None to go on: "eos" (an end token), "max_steps" (``max_new`` reached), "context" (the
    context window is full). The one rule of the generation Stepper and the journey's greedy loop."""
    if stop_at_eos and token in loaded.eos_ids():
        return "eos"
    if n_new >= max_new:
        return "max_steps"
    if n_total >= context_room(loaded):
        return "context"
    return None


def prompt_prefill(loaded: LoadedModel, tr: Trace) -> Step | None:
    """The prefill of ``tr``'s prompt without running it again: the trace's own forward pass already
    computed every layer's keys and values (``tr.k``, ``tr.v``: exactly what a KV cache holds) and the
    last position's scores. A fresh cache holding them, ready for ``forward_step``. A long prompt's trace
    keeps none (above ``hf_trace.KV_KEEP_MAX`` tokens: memory): they are then formed again from its kept
    residual stream, each layer's projections only (``hf_trace.prompt_kv``); None when even that is not
    possible (the caller runs the prefill)."""
    dtype = next(loaded.model.parameters()).dtype
    if not (tr.keeps("k") and tr.keeps("v")):  # (reading tr.k would derive whole layers: never here)
        kv = None if loaded.is_toy else hf_trace.prompt_kv(loaded, tr)
        return None if kv is None else Step(np.array(tr.last_logits, dtype=np.float32), None, cache_from(loaded, kv), 0.0)
    kv = [(torch.tensor(tr.k[i], dtype=dtype)[None], torch.tensor(tr.v[i], dtype=dtype)[None])  # [1, Hkv, T, dh]
          for i in range(tr.n_layers)]
    return Step(np.array(tr.last_logits, dtype=np.float32), None, cache_from(loaded, kv), 0.0)


def cache_from(loaded: LoadedModel, kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A fresh KV cache of the model's kind (the toy's list, or an HF DynamicCache) holding ``kv``,
    per layer (K, V) [B, Hkv, T, dh]; ``cache_layers`` reads it back."""
    if loaded.is_toy:
        return list(kv)
    cache = DynamicCache(config=loaded.model.config)
    for i, (k, v) in enumerate(kv):
        cache.update(k, v, i)
    return cache


def last_logits(loaded: LoadedModel, x: torch.Tensor) -> torch.Tensor:
    """One plain forward pass of a batch, no cache: ids [B, T] → the scores for the next token after
    each row, [B, V]. The caller holds ``loaded.lock`` and picks the grad mode (inference_mode for
    patched runs, enable_grad for attributions) and its own scoped hooks (core.cause)."""
    logits, _, _ = (_toy_forward if loaded.is_toy else _hf_forward)(loaded, x, None, False, False)
    return logits[:, -1]


def prefix_kv(loaded: LoadedModel, ids: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The keys and values of a plain forward pass of ``ids`` ([1, P]), per layer (K, V), each
    [1, Hkv, P, dh]: what a later pass may start from instead of recomputing those positions."""
    return [(k.detach(), v.detach()) for k, v in cache_layers(forward_step(loaded, ids).cache)]


def last_logits_after(loaded: LoadedModel, x: torch.Tensor, prefix: Sequence[tuple[torch.Tensor, torch.Tensor]],
                      rows: int = 1, rows_from: int = 0) -> torch.Tensor:
    """``last_logits`` of ids ``x`` [1, Tnew] fed after the positions whose keys and values ``prefix``
    holds (``prefix_kv``), each pass with a fresh cache so that ``prefix`` itself is never extended.
    From block ``rows_from`` on the caller's hooks make ``rows`` rows out of the one (core.cause), so
    those blocks' cached keys and values are shared by all of them (a view, not copies). The caller
    holds ``loaded.lock`` and picks the grad mode and its hooks, as for ``last_logits``."""
    kv = [(k, v) if i < rows_from else (k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1))
          for i, (k, v) in enumerate(prefix)]
    logits, _, _ = (_toy_forward if loaded.is_toy else _hf_forward)(loaded, x, cache_from(loaded, kv), True, False)
    return logits[:, -1]


def cache_layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(K, V) per layer, each [1, Hkv, T, dh], from either kind of cache."""
    if cache is None:
        return []
    if isinstance(cache, (list, tuple)):  # the toy's list of (K, V)
        return [(kv[0], kv[1]) for kv in cache]
    return [(layer.keys, layer.values) for layer in cache.layers]  # transformers 5.x DynamicCache
