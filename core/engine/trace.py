"""Trace: one record of one forward pass, the same for the real model and the toy.

Every page and plot reads only this. Arrays are numpy, batch dimension dropped, on CPU.

Storage choices (so that a 256-token SmolLM2 trace stays near 120 MB, see the README):

* activations (``embeddings``, ``resid``, ``attn_out``, ``mlp_out``, ``q``, ``k``, ``v``,
  ``final_hidden``) are float32, exactly what the model computed;
* ``attn_pattern`` is float16: weights live in [0, 1], where float16 is exact to < 2.5e-4,
  finer than any figure shows (halves the biggest array);
* the full logits [T, V] (50 MB at 256 tokens) are *not* kept eagerly: ``last_logits`` [V]
  (what the next token is chosen from) is exact float32, every position keeps its top-K
  logits and its log-sum-exp (so the top-K probabilities at every position are exact), and the
  whole [T, V] matrix is recomputed on demand from ``final_hidden`` (``core.backends.full_logits``)
  for the export, bit-for-bit what the LM head gives.
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

MAX_TOKENS = 512  # the trace limit: longer prompts are cut, with a visible notice
TOP_K = 10  # top next-token candidates kept for every position

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
    attn_out: np.ndarray  # [L, T, d] what each attention sub-layer adds
    mlp_out: np.ndarray  # [L, T, d] what each MLP sub-layer adds
    q: np.ndarray  # [L, H, T, dh] after RoPE where the model uses it
    k: np.ndarray  # [L, Hkv, T, dh] after RoPE: exactly what the KV cache holds
    v: np.ndarray  # [L, Hkv, T, dh]
    attn_pattern: np.ndarray  # [L, H, T, T] float16, after mask and softmax
    final_hidden: np.ndarray  # [T, d] after the final norm: the LM head's input
    # the output
    last_logits: np.ndarray  # [V] float32, next-token scores at the last position
    top_ids: np.ndarray  # [T, K] int64, the K best next tokens at every position
    top_logits: np.ndarray  # [T, K] float32
    logsumexp: np.ndarray  # [T] float32: log Σ exp(logits), so p = exp(logit − lse) exactly
    # facts and provenance
    meta: dict[str, Any] = field(default_factory=dict)  # model facts + source + settings
    truncated_from: int | None = None  # prompt length in tokens before truncation, if it was cut
    notes: list[str] = field(default_factory=list)
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # toy-only sites (raw scores, gate …)

    # -- shapes --------------------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def n_layers(self) -> int:
        return int(self.attn_out.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.q.shape[1])

    @property
    def n_kv_heads(self) -> int:
        return int(self.k.shape[1])

    @property
    def head_dim(self) -> int:
        return int(self.q.shape[3])

    @property
    def d_model(self) -> int:
        return int(self.resid.shape[2])

    @property
    def vocab_size(self) -> int:
        return int(self.last_logits.shape[0])

    @property
    def geometry(self) -> HeadGeometry:
        """The traced model's attention shape (from the arrays themselves)."""
        return HeadGeometry(str(self.meta.get("model", "trace")), self.n_layers, self.n_heads, self.n_kv_heads, self.head_dim,
                            self.d_model, bytes_per_value=self.k.dtype.itemsize)

    def kv_head_of(self, h: int) -> int:
        """Query head h reads KV head h // (H // Hkv)."""
        return self.geometry.kv_head_of(h)

    # -- derived, exact ------------------------------------------------------------------
    def last_probs(self, temperature: float = 1.0) -> np.ndarray:
        return softmax(self.last_logits, temperature=temperature)

    def top_probs(self) -> np.ndarray:
        """[T, K] probabilities of the stored top-K tokens at every position (softmax, T=1)."""
        return np.exp(self.top_logits.astype(np.float64) - self.logsumexp[:, None].astype(np.float64))

    @property
    def nbytes(self) -> int:
        total = 0
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                total += v.nbytes
        total += sum(a.nbytes for a in self.extras.values())
        return total

    # -- export ----------------------------------------------------------------------------
    def to_npz(self, path: str | Path, logits: np.ndarray | None = None) -> None:
        """Write the contract's keys to ``path`` (compressed).

        ``logits`` [T, V]: pass ``core.backends.full_logits(loaded, trace)``; without it the key
        ``logits`` holds only the last position, [1, V] (and ``meta`` says so).
        """
        arrays: dict[str, np.ndarray] = {}
        for key in ARRAY_KEYS:
            arrays[key] = np.asarray(getattr(self, key))
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
            shapes={k: list(v.shape) for k, v in arrays.items()},
        )
        arrays["meta"] = np.asarray(json.dumps(meta, ensure_ascii=False, default=str))
        np.savez_compressed(path, **arrays)

    def to_npz_bytes(self, logits: np.ndarray | None = None) -> bytes:
        buf = io.BytesIO()
        self.to_npz(buf, logits)  # type: ignore[arg-type]
        return buf.getvalue()


def load_npz(path: str | Path) -> dict[str, Any]:
    """Read an exported trace back: arrays by key, ``meta`` as a dict."""
    with np.load(path, allow_pickle=False) as z:
        out: dict[str, Any] = {k: z[k] for k in z.files}
    out["meta"] = json.loads(str(out["meta"]))
    return out
