"""Run a model once and fill a Trace.

Real (HF) models: forward hooks scoped by a ``with`` block (removed in ``finally``) read the
residual-stream sites, and the "xray" attention implementation (``core.xray_attention``) reads
q/k/v/weights inside HF's own eager attention. Hooks and attention recording both ignore every
thread but the one tracing, and the model's lock serialises forward passes, so many sessions can
share one model and each gets exactly the trace it would get alone.

The toy model fills the same Trace through its own probes (``core.toy``).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from core import xray_attention
from core.trace import Trace

MAX_TOKENS = 512  # the trace limit: longer prompts are cut, with a visible notice
TOP_K = 10  # top next-token candidates kept for every position

ATTN_NAMES = ("self_attn", "attn", "attention", "self_attention")
MLP_NAMES = ("mlp", "feed_forward", "ffn")

# How many traced forward passes this process has run: tests use it to prove that choosing what
# to look at (a layer, a head, a colour) reads the cached trace and never runs the model again.
FORWARD_PASSES = 0


class EmptyPromptError(ValueError):
    """The prompt has nothing to trace."""


class UnsupportedArchitectureError(RuntimeError):
    """The tracer cannot follow this architecture; the message names what is unsupported."""


# ---------------------------------------------------------------------------------------------
# Tokenising


@dataclass(frozen=True)
class Encoded:
    text: str
    ids: list[int]
    truncated_from: int | None
    notes: tuple[str, ...] = ()


def _byte_decoder() -> dict[str, int]:
    # GPT-2's reversible byte ↔ printable-character table, used by byte-level BPE tokenizers.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_DEC = _byte_decoder()


def readable_tokens(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token decoded on its own. A piece that is only part of a UTF-8 character (a Chinese
    character is often 2–3 byte tokens) is shown as its bytes, e.g. ⟨E8 8B⟩, never as �."""
    out = []
    raw = tokenizer.convert_ids_to_tokens(list(ids))
    for i, r in zip(ids, raw):
        s = tokenizer.decode([i])
        if "\ufffd" in s and isinstance(r, str) and all(ch in _BYTE_DEC for ch in r):
            s = "⟨" + " ".join(f"{_BYTE_DEC[ch]:02X}" for ch in r) + "⟩"
        out.append(s)
    return out


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_text(tokenizer: Any, prompt: str) -> str:
    """The prompt as one user message, with the generation prompt (the assistant header) added."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


def encode(tokenizer: Any, prompt: str, *, chat: bool = False, max_tokens: int = MAX_TOKENS) -> Encoded:
    if prompt is None or not prompt.strip():
        raise EmptyPromptError("The prompt is empty.")
    notes: list[str] = []
    text = prompt
    if chat:
        if has_chat_template(tokenizer):
            text = chat_text(tokenizer, prompt)
        else:
            notes.append("This tokenizer has no chat template: the prompt is used as plain text.")
    ids = tokenizer(text, add_special_tokens=not chat)["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    if not ids:
        raise EmptyPromptError("The prompt produced no tokens.")
    truncated_from = None
    if len(ids) > max_tokens:
        truncated_from = len(ids)
        ids = ids[:max_tokens]
        notes.append(f"The prompt is {truncated_from} tokens long; only the first {max_tokens} are traced.")
    return Encoded(text, [int(i) for i in ids], truncated_from, tuple(notes))


# ---------------------------------------------------------------------------------------------
# Finding the sites in an HF model


@dataclass
class Sites:
    embed: Any
    blocks: list[Any]
    attns: list[Any]
    mlps: list[Any]
    lm_head: Any


def child_by_name(block: Any, names: tuple[str, ...]) -> Any | None:
    """The first attribute of ``block`` named in ``names`` (role names differ across architectures)."""
    for n in names:
        m = getattr(block, n, None)
        if m is not None:
            return m
    return None


def find_sites(model: Any) -> Sites:
    import torch

    n_layers = int(getattr(model.config, "num_hidden_layers", 0) or getattr(model.config, "n_layer", 0))
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n_layers]
    if not lists:
        raise UnsupportedArchitectureError(f"no list of {n_layers} decoder blocks was found in {type(model).__name__}.")
    blocks = list(lists[0][1])
    attns, mlps = [], []
    for i, b in enumerate(blocks):
        a, m = child_by_name(b, ATTN_NAMES), child_by_name(b, MLP_NAMES)
        if a is None or m is None:
            raise UnsupportedArchitectureError(
                f"block {i} ({type(b).__name__}) has no attention ({'/'.join(ATTN_NAMES)}) or MLP ({'/'.join(MLP_NAMES)}) sub-module."
            )
        if child_by_name(b, ("crossattention", "encoder_attn")) is not None and getattr(model.config, "add_cross_attention", False):
            raise UnsupportedArchitectureError("blocks with cross-attention are not decoder-only.")
        attns.append(a)
        mlps.append(m)
    lm_head = model.get_output_embeddings()
    if lm_head is None:
        raise UnsupportedArchitectureError(f"{type(model).__name__} has no LM head.")
    return Sites(model.get_input_embeddings(), blocks, attns, mlps, lm_head)


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, (tuple, list)) else x


@contextlib.contextmanager
def _hooks(sites: Sites, store: dict[str, Any]) -> Iterator[None]:
    """Forward hooks for this thread only, always removed on exit."""
    tid = threading.get_ident()
    handles = []

    def mine() -> bool:
        return threading.get_ident() == tid

    def put(key: str, i: int | None, val: Any) -> None:
        if i is None:
            store[key] = val.detach()
        else:
            store.setdefault(key, {})[i] = val.detach()

    def on_embed(_m, _inp, out):
        if mine():
            put("embeddings", None, _first(out))

    def on_lm_head(_m, args, kwargs):
        if mine():
            x = args[0] if args else kwargs.get("input")
            put("final_hidden", None, x)

    handles.append(sites.embed.register_forward_hook(on_embed))
    handles.append(sites.lm_head.register_forward_pre_hook(on_lm_head, with_kwargs=True))
    for i, (b, a, m) in enumerate(zip(sites.blocks, sites.attns, sites.mlps)):

        def on_block_in(_m, args, kwargs, i=i):
            if mine():
                put("resid_pre", i, args[0] if args else kwargs["hidden_states"])

        def on_block_out(_m, _a, out, i=i):
            if mine():
                put("resid_post", i, _first(out))

        def on_attn(_m, _a, out, i=i):
            if mine():
                put("attn_out", i, _first(out))

        def on_mlp(_m, _a, out, i=i):
            if mine():
                put("mlp_out", i, _first(out))

        handles.append(b.register_forward_pre_hook(on_block_in, with_kwargs=True))
        handles.append(b.register_forward_hook(on_block_out))
        handles.append(a.register_forward_hook(on_attn))
        handles.append(m.register_forward_hook(on_mlp))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# ---------------------------------------------------------------------------------------------
# Tracing


def _np(t: Any, dtype: Any = np.float32) -> np.ndarray:
    return t.detach().to("cpu").float().numpy().astype(dtype, copy=False)


def _stack(d: dict[int, Any], n: int, what: str) -> Any:
    import torch

    if sorted(d) != list(range(n)):
        raise UnsupportedArchitectureError(f"{what} was not seen for every layer ({len(d)} of {n}).")
    return torch.stack([d[i][0] for i in range(n)])  # drop batch → [L, T, d]


def trace(loaded: Any, prompt: str, *, chat: bool = False, max_tokens: int = MAX_TOKENS) -> Trace:
    """One forward pass of ``loaded`` on ``prompt``, recorded. See ``core.trace.Trace``."""
    if loaded.kind == "toy":
        from core import toy

        return toy.trace_toy(loaded, prompt, chat=chat, max_tokens=max_tokens)
    enc = encode(loaded.tokenizer, prompt, chat=chat, max_tokens=max_tokens)
    return trace_ids(loaded, enc.ids, prompt=prompt, text=enc.text, chat=chat, truncated_from=enc.truncated_from, notes=list(enc.notes))


def trace_ids(
    loaded: Any,
    ids: list[int],
    *,
    prompt: str = "",
    text: str = "",
    chat: bool = False,
    truncated_from: int | None = None,
    notes: list[str] | None = None,
) -> Trace:
    import torch

    model, facts = loaded.model, loaded.facts
    sites = find_sites(model)
    L = facts.n_layers
    store: dict[str, Any] = {}
    global FORWARD_PASSES
    input_ids = torch.tensor([ids], dtype=torch.long)
    FORWARD_PASSES += 1
    with loaded.lock, torch.inference_mode(), _hooks(sites, store), xray_attention.recording() as rec:
        out = model(input_ids=input_ids, use_cache=False)
    logits = out.logits[0]  # [T, V]

    calls = [c for c in rec.calls]
    if len(calls) != L:
        raise UnsupportedArchitectureError(
            f"the attention of {type(model).__name__} did not go through transformers' attention interface "
            f"({len(calls)} of {L} layers seen); its q/k/v and weights cannot be read faithfully."
        )
    q = torch.stack([c["query"][0] for c in calls])  # [L, H, T, dh]
    k = torch.stack([c["key"][0] for c in calls])  # [L, Hkv, T, dh]
    v = torch.stack([c["value"][0] for c in calls])  # [L, Hkv, T, dh]
    T = len(ids)
    # One copy that also converts to float16 (torch does it multi-threaded; numpy's astype is
    # several times slower on the biggest array of the trace).
    w = torch.empty((L, facts.n_heads, T, T), dtype=torch.float16)  # [L, H, T, T]
    for layer, c in enumerate(calls):
        w[layer].copy_(c["weights"][0])

    pre, post = store.get("resid_pre", {}), store.get("resid_post", {})
    if sorted(post) != list(range(L)):
        raise UnsupportedArchitectureError(f"the residual stream leaving a block was not seen for every layer ({len(post)} of {L}).")
    for i in range(L - 1):  # the stream leaving block i must be exactly the one entering block i+1
        if i + 1 in pre and not (post[i] is pre[i + 1] or torch.equal(post[i], pre[i + 1])):
            raise UnsupportedArchitectureError("something sits between consecutive blocks; the residual stream is not one chain.")
    resid_pre = _stack(pre, L, "the residual stream entering a block")
    attn_out = _stack(store.get("attn_out", {}), L, "the attention output")
    mlp_out = _stack(store.get("mlp_out", {}), L, "the MLP output")
    resid = torch.cat([resid_pre, post[L - 1][:1]], dim=0)  # [L+1, T, d]
    # The contract's identity, checked on every trace: a block that is not "x + attn + mlp"
    # (post-norm, extra norms on the branches …) is refused rather than drawn wrongly.
    gap = torch.sub(resid[1:], resid[:-1]).sub_(attn_out).sub_(mlp_out).abs_().max().item()  # in place: one temporary
    scale = max(1.0, resid.abs().max().item())  # float32 rounding grows with the stream's magnitude
    if gap > 1e-4 * scale:
        raise UnsupportedArchitectureError(
            f"the blocks of {type(model).__name__} are not pre-norm residual blocks "
            f"(resid[l+1] − resid[l] − attn_out − mlp_out reaches {gap:.3g}): e.g. post-norm or extra branch norms."
        )
    emb = store["embeddings"][0]
    final_hidden = store["final_hidden"][0]

    lse = torch.logsumexp(logits.float(), dim=-1)
    top = torch.topk(logits, k=min(TOP_K, logits.shape[-1]), dim=-1)
    tokens = readable_tokens(loaded.tokenizer, ids)
    meta = {
        "model": facts.name,
        "model_kind": loaded.kind,
        "source": loaded.source,
        "facts": facts.to_dict(),
        "chat": chat,
    }
    return Trace(
        prompt=prompt,
        text=text,
        chat=chat,
        tokens=np.asarray(tokens, dtype=object),
        token_ids=np.asarray(ids, dtype=np.int64),
        embeddings=_np(emb),
        resid=_np(resid),
        attn_out=_np(attn_out),
        mlp_out=_np(mlp_out),
        q=_np(q),
        k=_np(k),
        v=_np(v),
        attn_pattern=w.numpy(),
        final_hidden=_np(final_hidden),
        last_logits=_np(logits[-1]),
        top_ids=top.indices.numpy().astype(np.int64),
        top_logits=_np(top.values),
        logsumexp=_np(lse),
        meta=meta,
        truncated_from=truncated_from,
        notes=list(notes or []),
    )


def full_logits(loaded: Any, tr: Trace) -> np.ndarray:
    """The whole [T, V] logits matrix, recomputed from ``final_hidden`` by the LM head."""
    import torch

    if loaded.kind == "toy":
        from core import toy

        return toy.full_logits(loaded, tr)
    head = loaded.model.get_output_embeddings()
    with loaded.lock, torch.inference_mode():
        x = torch.from_numpy(np.ascontiguousarray(tr.final_hidden))[None]  # [1, T, d]
        return head(x)[0].float().numpy()


def export_npz(loaded: Any, tr: Trace, path: Any) -> None:
    tr.to_npz(path, logits=full_logits(loaded, tr))


def export_npz_bytes(loaded: Any, tr: Trace) -> bytes:
    return tr.to_npz_bytes(logits=full_logits(loaded, tr))
