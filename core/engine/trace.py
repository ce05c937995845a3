"""Trace: one record of one forward pass, the same for the real model and the toy.

Every page and plot reads only this (and, for one layer's details, ``core.backends.layer_detail``).
Arrays are numpy, batch dimension dropped, on CPU, read-only (one trace is shared by every
session that asks for the same prompt).

What a trace *keeps* is what cannot be recomputed cheaply; what it *derives* is exact and on demand:

* kept, float32, exactly what the model computed: ``embeddings``, the residual stream ``resid``
  [L+1, T, d] at every block boundary, ``final_hidden``; the norms of what each sub-layer added
  (``attn_out_norm``, ``mlp_out_norm`` [L, T]); ``last_logits`` [V];
* kept for the real model: ``k`` and ``v`` of every layer up to 1,024 tokens (what its forward already
  computed: the prompt's KV cache, so a continuation decodes without a second prefill); ``replay``, what each block was called with besides its input (masks as
  bits, rotary cos/sin, position ids) — a few MB even at 4,096 tokens;
* derived per layer on demand (``core.backends.layer_detail``): q, k, v, the attention weights and
  the two sub-layer outputs, by re-running that one block on ``resid[l]`` with its recorded
  arguments and HF's own eager attention — activation checkpointing, applied to tracing. The
  replay is checked against the kept ``resid[l+1]``;
* the toy keeps everything eagerly (``q`` … ``attn_pattern``, it is tiny), so its details are slices.

Any position's next-token candidates (top-K logits and the log-sum-exp, so their probabilities are
exact) are derived from ``final_hidden`` by the LM head on demand (``core.backends.next_tokens``),
and the whole [T, V] logits matrix likewise (``core.backends.full_logits``) for the export,
bit-for-bit what the LM head gives.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from core.engine.numbers import softmax
from core.engine.types import HeadGeometry

MAX_TOKENS = 4096  # the trace limit: longer prompts are cut, with a visible notice
TOP_K = 10  # next-token candidates per position (core.backends.next_tokens)
PATTERN_EXPORT_MAX = 1024  # the .npz keeps attn_pattern (float16) up to this many tokens (30 × 9 × 1024² × 2 B = 0.57 GB)

# The arrays of the contract (the .npz export keys), in order.
ARRAY_KEYS = (
    "tokens",
    "token_ids",
    "embeddings",
    "resid",
    "attn_out",
    "mlp_out",
    "q",
    "k",
    "v",
    "attn_pattern",
    "final_hidden",
)


@dataclass(frozen=True)
class LayerDetail:
    """Everything one layer computed for one trace (``core.backends.layer_detail``)."""

    layer: int
    q: np.ndarray  # [H, T, dh] after RoPE
    k: np.ndarray  # [Hkv, T, dh] after RoPE: what the KV cache holds
    v: np.ndarray  # [Hkv, T, dh]
    weights: np.ndarray  # [H, T, T] float16 (exact to < 2.5e-4 in [0, 1]), after mask and softmax
    attn_out: np.ndarray  # [T, d] what the attention sub-layer adds
    mlp_out: np.ndarray  # [T, d] what the MLP sub-layer adds

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.q, self.k, self.v, self.weights, self.attn_out, self.mlp_out))

    def head(self, h: int) -> np.ndarray:
        """[T, T] float32 weights of one query head."""
        return self.weights[h].astype(np.float32)


@dataclass(frozen=True)
class NextTokens:
    """The best next tokens at some positions of a trace (``core.backends.next_tokens``)."""

    positions: np.ndarray  # [n] int64, which positions of the trace
    ids: np.ndarray  # [n, K] int64, the K highest-scoring next tokens, best first
    logits: np.ndarray  # [n, K] float32, their logits
    logsumexp: np.ndarray  # [n] float32: log Σ exp(all V logits), so p = exp(logit − lse) exactly

    def probs(self) -> np.ndarray:
        """[n, K] the softmax probabilities (temperature 1) of ``ids``."""
        return np.exp(self.logits.astype(np.float64) - self.logsumexp[:, None].astype(np.float64))

    @staticmethod
    def of_logits(positions: np.ndarray, logits: np.ndarray, k: int = TOP_K) -> NextTokens:
        """From rows of a full logits matrix ([n, V], e.g. ``full_logits(…)[positions]``)."""
        x = np.asarray(logits, dtype=np.float32)
        k = min(k, x.shape[-1])
        ids = np.argsort(-x, axis=-1, kind="stable")[:, :k]
        m = x.max(axis=-1, keepdims=True).astype(np.float64)
        lse = (m[:, 0] + np.log(np.exp(x - m).sum(axis=-1))).astype(np.float32)
        return NextTokens(np.asarray(positions, dtype=np.int64), ids.astype(np.int64),
                          np.take_along_axis(x, ids, axis=-1), lse)


@dataclass
class Trace:
    # what went in
    prompt: str
    text: str  # the exact string tokenised (after the chat template, if any)
    chat: bool
    tokens: np.ndarray  # [T] str: each piece decoded on its own (readable)
    token_ids: np.ndarray  # [T] int64
    # the residual-stream sites
    embeddings: np.ndarray  # [T, d]   token-embedding rows, before any position information
    resid: np.ndarray  # [L+1, T, d] entering block 0 … leaving block L-1 (before the final norm)
    attn_out_norm: np.ndarray  # [L, T] float32: ‖what attention adds‖ at every (layer, position)
    mlp_out_norm: np.ndarray  # [L, T] float32: ‖what the MLP adds‖
    last_attn: np.ndarray  # [L, H, T] float32: what the last position (the one predicting) attends to, exact
    final_hidden: np.ndarray  # [T, d] after the final norm: the LM head's input
    # the output
    last_logits: np.ndarray  # [V] float32, next-token scores at the last position
    # the attention geometry: (H, Hkv, dh) and the bytes of one cached K or V value
    head_shape: tuple[int, int, int]
    kv_itemsize: int
    # facts and provenance
    meta: dict[str, Any] = field(default_factory=dict)  # model facts + source + settings
    truncated_from: int | None = None  # prompt length in tokens before truncation, if it was cut
    notes: list[str] = field(default_factory=list)
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # toy-only sites (raw scores, gate …)
    # kept eagerly by the toy ([L, …], same meaning as LayerDetail's fields); None for HF, except k and v:
    # an HF trace of up to hf_trace.KV_KEEP_MAX tokens keeps them ([L, Hkv, T, dh], exactly the prefill's
    # KV cache, see core.backends.prompt_prefill)
    q: np.ndarray | None = None
    k: np.ndarray | None = None
    v: np.ndarray | None = None
    attn_pattern: np.ndarray | None = None  # [L, H, T, T] float16
    attn_out: np.ndarray | None = None
    mlp_out: np.ndarray | None = None
    # the real model's replay recipe (core.engine.hf_trace.Replay); None for the toy
    replay: Any = None

    def __post_init__(self) -> None:
        for a in self._arrays():
            a.flags.writeable = False  # shared between sessions: nobody may edit it in place

    def _arrays(self) -> list[np.ndarray]:
        out = [v for f in fields(self) if isinstance(v := getattr(self, f.name), np.ndarray)]
        return out + list(self.extras.values())

    # -- shapes --------------------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def n_layers(self) -> int:
        return int(self.resid.shape[0]) - 1

    @property
    def n_heads(self) -> int:
        return int(self.head_shape[0])

    @property
    def n_kv_heads(self) -> int:
        return int(self.head_shape[1])

    @property
    def head_dim(self) -> int:
        return int(self.head_shape[2])

    @property
    def d_model(self) -> int:
        return int(self.resid.shape[2])

    @property
    def vocab_size(self) -> int:
        return int(self.last_logits.shape[0])

    @property
    def geometry(self) -> HeadGeometry:
        """The traced model's attention shape."""
        return HeadGeometry(str(self.meta.get("model", "trace")), self.n_layers, self.n_heads, self.n_kv_heads, self.head_dim,
                            self.d_model, bytes_per_value=self.kv_itemsize)

    def kv_head_of(self, h: int) -> int:
        """Query head h reads KV head h // (H // Hkv)."""
        return self.geometry.kv_head_of(h)

    # -- derived, exact ------------------------------------------------------------------
    def last_probs(self, temperature: float = 1.0) -> np.ndarray:
        return softmax(self.last_logits, temperature=temperature)

    @property
    def nbytes(self) -> int:
        """What holding (or pickling, for st.cache_data) this trace costs: every array, the replay
        recipe and the token strings (a test checks it against ``len(pickle.dumps(trace))``)."""
        total = sum(a.nbytes for a in self._arrays() if a.dtype != object)
        total += sum(len(str(t).encode("utf-8")) + 50 for t in self.tokens)  # a str object's own overhead
        if self.replay is not None:
            total += int(self.replay.nbytes)
        return total

    # -- export ----------------------------------------------------------------------------
    def to_npz(self, path: str | Path, logits: np.ndarray | None = None,
               layers: dict[str, np.ndarray] | None = None) -> None:
        """Write the contract's keys to ``path`` (compressed).

        ``logits`` [T, V]: pass ``core.backends.full_logits(loaded, trace)``; without it the key
        ``logits`` holds only the last position, [1, V] (and ``meta`` says so).
        ``layers``: the per-layer sites stacked over layers (``q k v attn_out mlp_out`` and, up to
        ``PATTERN_EXPORT_MAX`` tokens, ``attn_pattern``), as ``core.backends.export_npz`` derives them;
        by default the arrays this trace keeps itself (the toy). A key left out is named in
        ``meta["omitted"]`` with the reason.
        """
        arrays: dict[str, np.ndarray] = {}
        omitted: dict[str, str] = {}
        for key in ARRAY_KEYS:
            val = (layers or {}).get(key, getattr(self, key, None))
            if val is None:
                omitted[key] = (f"attention weights of a {self.n_tokens}-token trace would take "
                                f"{self.n_layers * self.n_heads * self.n_tokens ** 2 * 2 / 1e9:.1f} GB; exported up to "
                                f"{PATTERN_EXPORT_MAX} tokens (derive them with core.backends.layer_detail)"
                                if key == "attn_pattern" else "not recorded")
                continue
            arrays[key] = np.asarray(val)
        arrays["tokens"] = np.asarray([str(t) for t in self.tokens], dtype=np.str_)
        full = logits is not None
        arrays["logits"] = np.asarray(logits if full else self.last_logits[None, :], dtype=np.float32)
        meta = dict(self.meta)
        meta.update(
            prompt=self.prompt,
            text=self.text,
            chat=self.chat,
            logits_positions="all" if full else "last",
            truncated_from=self.truncated_from,
            notes=self.notes,
            omitted=omitted,
            shapes={k: list(v.shape) for k, v in arrays.items()},
        )
        arrays["meta"] = np.asarray(json.dumps(meta, ensure_ascii=False, default=str))
        np.savez_compressed(path, **arrays)

    def to_npz_bytes(self, logits: np.ndarray | None = None, layers: dict[str, np.ndarray] | None = None) -> bytes:
        buf = io.BytesIO()
        self.to_npz(buf, logits, layers)  # type: ignore[arg-type]
        return buf.getvalue()


def load_npz(path: str | Path) -> dict[str, Any]:
    """Read an exported trace back: arrays by key, ``meta`` as a dict."""
    with np.load(path, allow_pickle=False) as z:
        out: dict[str, Any] = {k: z[k] for k in z.files}
    out["meta"] = json.loads(str(out["meta"]))
    return out
