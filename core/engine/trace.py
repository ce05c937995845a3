"""Trace: one record of one forward pass, the same for the real model and the toy.

Every recorded site has one row in ``SITES`` and one door: ``tr.site(name, layer=None)`` (TransformerLens'
``cache[name, layer]``). Arrays are numpy, batch dropped, read-only (a trace is shared by every session).
Kept: ``embeddings``, ``resid`` [L+1, T, d], ``final_hidden``, the sub-layers' norms, ``last_logits`` (and
for the real model ``k`` / ``v`` up to ``hf_trace.KV_KEEP_MAX`` tokens and the ``replay`` recipe); derived
per layer when asked, by re-running that block on ``resid[l]`` and checking it against ``resid[l+1]``; the
toy keeps everything. The app reads derived sites one layer at a time through ``core.web.cache.site``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from core.common.numbers import softmax, top_k
from core.engine.types import HeadGeometry

MAX_TOKENS = 4096  # the trace limit: longer prompts are cut, with a visible notice
TOP_K = 10  # next-token candidates per position (core.backends.next_tokens)
PATTERN_EXPORT_MAX = 1024  # the .npz keeps attn_pattern (float16) up to this many tokens (30 × 9 × 1024² × 2 B = 0.57 GB)

# ---------------------------------------------------------------------------------------------
# The ONE registry of recorded sites: every array a trace records, kept or derived, one row each.
#
# Where a site lives (``Site.kind``):
KEPT = "kept"  # the trace holds it, for the real model and the toy alike
LAYER = "layer"  # per layer, one of ``LayerDetail``'s fields: derived on demand by replaying that block (HF;
#                  k and v kept up to hf_trace.KV_KEEP_MAX tokens), kept by the toy; ``tr.<name>`` stacks every layer
MLP = "mlp"  # per layer, inside the MLP: derived when asked by name, by replaying that layer's MLP (a model whose
#              MLP has no such part leaves it out); kept by the toy
DERIVED = "derived"  # recomputed from a kept site when asked (the full logits, from final_hidden, for the export)
CAPTURE = "capture"  # recorded only by the engine's site capture (``hf_trace.capture_sites``: activation patching)
TOY = "toy"  # kept only by the toy: every intermediate value its one-file model computes


@dataclass(frozen=True)
class Site:
    """One recorded site. ``shape`` is symbolic: T tokens, L layers, d the stream's width, H query heads,
    Hkv KV heads, dh a head's width, F the MLP's width, V the vocabulary; a shape starting "L," is per layer.
    ``tl``: TransformerLens' name for the same values, where it has one ({l} the layer)."""

    name: str  # the trace contract's name: a Trace field, an .npz key, a LayerDetail field or a toy probe
    shape: str
    dtype: str
    kind: str  # KEPT, LAYER, MLP, DERIVED, CAPTURE or TOY (above)
    tl: str = ""
    export: bool = False  # a key of the .npz export (``Trace.to_npz``), in the registry's order
    meaning: str = ""

    @property
    def per_layer(self) -> bool:
        return self.shape.startswith("L,")


# How to add a site (the MLP's gate activation, ``gate_act``, was added this way):
#   1. one row here: its name, shape, dtype, kind (and TransformerLens' name);
#   2. where it is computed: for an MLP part of the real model, the part's role names in
#      ``core.engine.roles`` (``MLP_PARTS``: the module whose output it is) — the MLP replay
#      (``hf_trace._mlp_replay``) records every MLP row that names a part there; for the toy, one
#      ``_probe(probe, name=tensor)`` line in ``core.toy.model`` (a probe's name must be a row here).
# The trace's keys (``ARRAY_KEYS``), ``LAYER_SITES`` / ``MLP_SITES``, ``LayerDetail.nbytes``,
# ``Trace.site`` (the one door), ``Trace.site_bytes``, the toy's kept sites, the export and the CLI read these rows.
SITES: tuple[Site, ...] = (
    Site("tokens", "T", "str", KEPT, "", True, "each token's piece, decoded on its own (readable)"),
    Site("token_ids", "T", "int64", KEPT, "", True, "the tokenizer's ids"),
    Site("embeddings", "T,d", "float32", KEPT, "hook_embed", True, "token-embedding rows, before any position information"),
    Site("resid", "L+1,T,d", "float32", KEPT, "blocks.{l}.hook_resid_pre; resid[L] = blocks.{L-1}.hook_resid_post", True,
         "the residual stream entering block 0 … leaving block L-1 (before the final norm)"),
    Site("attn_out", "L,T,d", "float32", LAYER, "blocks.{l}.hook_attn_out", True, "what the attention sub-layer adds"),
    Site("mlp_out", "L,T,d", "float32", LAYER, "blocks.{l}.hook_mlp_out", True,
         "what the MLP sub-layer adds (HF: resid[l+1] − resid[l] − attn_out, the contract's identity)"),
    Site("q", "L,H,T,dh", "float32", LAYER, "blocks.{l}.attn.hook_rot_q", True, "queries per head, after RoPE"),
    Site("k", "L,Hkv,T,dh", "float32", LAYER, "blocks.{l}.attn.hook_rot_k", True,
         "keys per KV head, after RoPE: what the KV cache holds"),
    Site("v", "L,Hkv,T,dh", "float32", LAYER, "blocks.{l}.attn.hook_v", True, "values per KV head"),
    Site("attn_pattern", "L,H,T,T", "float16", LAYER, "blocks.{l}.attn.hook_pattern", True,
         "attention weights after mask and softmax (exact to < 2.5e-4 in [0, 1])"),
    Site("final_hidden", "T,d", "float32", KEPT, "ln_final.hook_normalized", True, "after the final norm: the LM head's input"),
    Site("logits", "T,V", "float32", DERIVED, "the model's output", True,
         "next-token scores at every position: the LM head on final_hidden"),
    # kept, not exported: what the pages read without deriving a layer
    Site("attn_out_norm", "L,T", "float32", KEPT, "", False, "‖attn_out‖ at every (layer, position)"),
    Site("mlp_out_norm", "L,T", "float32", KEPT, "", False, "‖mlp_out‖ at every (layer, position)"),
    Site("last_attn", "L,H,T", "float32", KEPT, "blocks.{l}.attn.hook_pattern[…, -1, :]", False,
         "what the last position attends to, exact"),
    Site("last_logits", "V", "float32", KEPT, "", False, "next-token scores at the last position"),
    # inside the MLP (derived by the MLP replay; the toy keeps them)
    Site("gate_act", "L,T,F", "float32", MLP, "act_fn(blocks.{l}.mlp.hook_pre)", False,
         "the MLP's gate activation act_fn(gate_proj(x)), before it multiplies up_proj(x) (gated MLPs only)"),
    # the site capture's (activation patching)
    Site("z", "L,T,H·dh", "float32", CAPTURE, "blocks.{l}.attn.hook_z (heads side by side)", False,
         "every head's output, the attention's output projection's input: head h owns columns h·dh … (h+1)·dh"),
    # the toy's own intermediate values
    Site("pos", "T,d", "float32", TOY, "hook_pos_embed", False, "the position vectors added to the embeddings (zero for RoPE / none)"),
    Site("mask", "T,T", "float32", TOY, "", False, "the additive mask: 0 may look, −∞ may not (the same in every layer)"),
    Site("scores_raw", "L,H,T,T", "float32", TOY, "", False, "q·kᵀ per head, before scaling"),
    Site("scores_scaled", "L,H,T,T", "float32", TOY, "", False, "q·kᵀ/√dh"),
    Site("scores_masked", "L,H,T,T", "float32", TOY, "blocks.{l}.attn.hook_attn_scores", False, "q·kᵀ/√dh + mask"),
    Site("head_out", "L,H,T,dh", "float32", TOY, "blocks.{l}.attn.hook_z (heads first)", False, "each head's weighted average of values"),
    Site("concat", "L,T,H·dh", "float32", TOY, "blocks.{l}.attn.hook_z (heads side by side)", False, "the heads side by side: z"),
    Site("o_proj", "L,T,d", "float32", TOY, "blocks.{l}.hook_attn_out", False, "the output projection's output: attn_out (the figures' stage)"),
    Site("resid_mid", "L,T,d", "float32", TOY, "blocks.{l}.hook_resid_mid", False, "the stream between attention and MLP"),
    Site("gate", "L,T,F", "float32", TOY, "blocks.{l}.mlp.hook_pre", False, "gate_proj(x), before the activation (SwiGLU)"),
    Site("up", "L,T,F", "float32", TOY, "blocks.{l}.mlp.hook_pre_linear (GELU: hook_pre)", False, "up_proj(x)"),
    Site("act", "L,T,F", "float32", TOY, "blocks.{l}.mlp.hook_post", False, "down_proj's input: act_fn(gate)·up (GELU: gelu(up))"),
)
SITE = {s.name: s for s in SITES}


def sites_of(kind: str) -> tuple[str, ...]:
    """The names of the registry's rows of one ``kind``, in order."""
    return tuple(s.name for s in SITES if s.kind == kind)


def site_row(name: str) -> Site:
    """The registry's row for ``name``; a name it lacks is refused, naming the registry."""
    if name not in SITE:
        raise KeyError(f"{name!r} is not a recorded site (core.engine.trace.SITES); they are {', '.join(SITE)}")
    return SITE[name]


def shape_bytes(row: Site, dims: dict[str, int]) -> int:
    """What ``row``'s array takes at the sizes ``dims`` (symbol → size: L, L+1, T, d, H, Hkv, dh, F, V)."""
    n = 1
    for part in row.shape.split(","):
        for sym in part.split("·"):
            n *= dims[sym]
    return n * np.dtype(row.dtype).itemsize


# The per-layer sites of the contract ([L, …]: LayerDetail's fields stacked over layers): kept by the toy
# (and k, v by a short HF trace), derived on demand otherwise.
LAYER_SITES = sites_of(LAYER)
MLP_SITES = sites_of(MLP)  # derived by the MLP replay, on request
# The arrays of the contract (the .npz export keys), in order; ``logits`` comes with them (``to_npz``).
ARRAY_KEYS = tuple(s.name for s in SITES if s.export and s.kind != DERIVED)
EXPORT_KEYS = (*(s.name for s in SITES if s.export), "meta")  # every key of an exported .npz file


@dataclass(frozen=True)
class LayerDetail:
    """Everything one layer computed for one trace (``core.backends.layer_detail``): one field per
    ``LAYER_SITES`` row, in the registry's order (a test holds them together)."""

    layer: int
    attn_out: np.ndarray  # [T, d] what the attention sub-layer adds
    mlp_out: np.ndarray  # [T, d] what the MLP sub-layer adds
    q: np.ndarray  # [H, T, dh] after RoPE
    k: np.ndarray  # [Hkv, T, dh] after RoPE: what the KV cache holds
    v: np.ndarray  # [Hkv, T, dh]
    attn_pattern: np.ndarray  # [H, T, T] float16 (exact to < 2.5e-4 in [0, 1]), after mask and softmax

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in LAYER_SITES)

    def head(self, h: int) -> np.ndarray:
        """[T, T] float32 weights of one query head."""
        return self.attn_pattern[h].astype(np.float32)


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
        ids = top_k(x, k)  # [n, k], best first (ties: the lower id)
        m = x.max(axis=-1, keepdims=True).astype(np.float64)
        lse = (m[:, 0] + np.log(np.exp(x - m).sum(axis=-1))).astype(np.float32)
        return NextTokens(np.asarray(positions, dtype=np.int64), ids.astype(np.int64),
                          np.take_along_axis(x, ids, axis=-1), lse)


class SiteTooLargeError(ValueError):
    """A site asked of a whole trace that would not fit: the message says its size and the way round."""


class _LayerSite:
    """A per-layer field of the Trace, stacked over layers: a thin call to ``Trace.site(name)``. As a dataclass
    field's default it reads None (``__get__`` on the class), so ``Trace(…)`` takes it as an ordinary keyword."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = "_kept_" + name

    def __get__(self, obj: Trace | None, objtype: type | None = None) -> np.ndarray | None:
        return None if obj is None else obj.site(self.name)

    def __set__(self, obj: Trace, value: np.ndarray | None) -> None:
        obj.__dict__[self.slot] = value


# set by core.backends on every trace it makes: layer → that layer's LayerDetail; layer → its MLP sites by name
Deriver = Callable[["Trace", int], LayerDetail]
# a door to a trace's sites, (name, layer) → array: ``Trace.site``, or the web cache's memoised ``site``
SiteReader = Callable[[str, int | None], np.ndarray]
MlpDeriver = Callable[["Trace", int], dict[str, np.ndarray]]


class TraceKey(NamedTuple):
    """What a trace was made from (``Trace.key``): the model's spec, the prompt, the chat switch and the token limit."""

    spec: str
    prompt: str
    chat: bool
    max_tokens: int = MAX_TOKENS


@dataclass(eq=False)  # a trace is one record: equal only to itself (comparing fields would derive them)
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
    kept_sites: dict[str, np.ndarray] = field(default_factory=dict)  # TOY and MLP rows the trace keeps (the toy): read by ``site``
    # what it was made from (``key``): set by core.backends when it makes the trace
    model_spec: str = ""
    max_tokens: int = MAX_TOKENS
    # kept eagerly by the toy ([L, …], same meaning as LayerDetail's fields); None for HF, except k and v:
    # an HF trace of up to hf_trace.KV_KEEP_MAX tokens keeps them ([L, Hkv, T, dh], exactly the prefill's
    # KV cache, see core.backends.prompt_prefill)
    # (read: kept, or derived on first read when the trace knows its model; see the module's docstring)
    q: np.ndarray | None = _LayerSite()  # type: ignore[assignment]
    k: np.ndarray | None = _LayerSite()  # type: ignore[assignment]
    v: np.ndarray | None = _LayerSite()  # type: ignore[assignment]
    attn_pattern: np.ndarray | None = _LayerSite()  # type: ignore[assignment]  # [L, H, T, T] float16
    attn_out: np.ndarray | None = _LayerSite()  # type: ignore[assignment]
    mlp_out: np.ndarray | None = _LayerSite()  # type: ignore[assignment]
    # the real model's replay recipe (core.engine.hf_trace.Replay); None for the toy
    replay: Any = None

    def __post_init__(self) -> None:
        self.__dict__["_deriver"] = None
        self.__dict__["_mlp_deriver"] = None
        self.__dict__["_derived"] = {}
        for a in self._arrays():
            a.flags.writeable = False  # shared between sessions: nobody may edit it in place

    def _stored(self, name: str) -> Any:
        """A field's value as stored: never derives (a layer site the trace does not keep is None)."""
        return self.__dict__.get("_kept_" + name) if name in LAYER_SITES else getattr(self, name)

    def _arrays(self) -> list[np.ndarray]:
        out = [v for f in fields(self) if isinstance(v := self._stored(f.name), np.ndarray)]
        return out + list(self.kept_sites.values()) + list(self.__dict__.get("_derived", {}).values())

    def __repr__(self) -> str:
        return (f"Trace({self.meta.get('model', '?')!s}, {self.n_tokens} tokens, {self.n_layers} layers, "
                f"prompt={self.prompt[:40]!r}{'…' if len(self.prompt) > 40 else ''})")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_deriver"] = state["_mlp_deriver"] = None  # a reference to the model: it does not travel
        return state

    @property
    def key(self) -> TraceKey:
        """What this trace was made from: the model's spec, the prompt, the chat switch, the token limit."""
        return TraceKey(self.model_spec, self.prompt, self.chat, self.max_tokens)

    # -- the per-layer sites ---------------------------------------------------------------
    def keeps(self, site: str) -> bool:
        """Whether this trace holds ``site`` (one of ``LAYER_SITES``) itself, for every layer."""
        if site not in LAYER_SITES:
            raise KeyError(f"{site!r} is not a per-layer site; they are {', '.join(LAYER_SITES)}")
        return self.__dict__.get("_kept_" + site) is not None

    def derive_with(self, deriver: Deriver | None, mlp: MlpDeriver | None = None) -> None:
        """Tell the trace how to derive a layer (and its MLP sites) it does not keep (``core.backends`` does, for every trace)."""
        self.__dict__["_deriver"] = deriver
        self.__dict__["_mlp_deriver"] = mlp

    def site(self, name: str, layer: int | None = None) -> np.ndarray:
        """The one door to every recorded site (``SITES``), TransformerLens' ``cache[name, layer]``: ``layer``
        None gives every layer stacked ([L, …]; ``resid`` [L+1, …]), an int that layer's slice. A site the
        trace does not keep is derived (per layer sites: by replaying that block; MLP sites: its MLP)."""
        row = site_row(name)
        if row.kind == KEPT or name in self.kept_sites:
            a = getattr(self, name) if row.kind == KEPT else self.kept_sites[name]
            return a if layer is None or not row.shape.startswith("L") else a[int(layer)]
        if row.kind == LAYER:
            kept = self.__dict__.get("_kept_" + name)
            if kept is not None:
                return kept if layer is None else kept[int(layer)]
            return self._derive(name) if layer is None else getattr(self.layer(layer), name)
        if row.kind == MLP:
            if layer is None:
                return self._derive(name)
            parts = self._mlp(int(layer))
            if name not in parts:
                raise KeyError(f"this model's MLP has no part for {name!r} ({row.meaning})")
            return parts[name]
        raise KeyError(f"{name!r} ({row.kind}) is not kept by this trace: "
                       + ("core.backends.full_logits derives it" if row.kind == DERIVED else "core.cause.patching records it"))

    def _mlp(self, layer: int) -> dict[str, np.ndarray]:
        deriver = self.__dict__.get("_mlp_deriver")
        if deriver is None:
            raise RuntimeError("this trace does not know the model it came from (it was made by hand, or unpickled)")
        return deriver(self, layer)

    def site_bytes(self, site: str) -> int:
        """What ``site`` for every layer takes in memory (what reading it costs, when it is derived)."""
        dims = {"L": self.n_layers, "H": self.n_heads, "Hkv": self.n_kv_heads, "dh": self.head_dim, "T": self.n_tokens,
                "d": self.d_model, "V": self.vocab_size, "L+1": self.n_layers + 1}
        return shape_bytes(site_row(site), dims)

    def layer(self, layer: int) -> LayerDetail:
        """Everything layer ``layer`` computed (q, k, v, the attention weights, the two sub-layer outputs),
        exactly: sliced from what the trace keeps, or derived by replaying that one block."""
        deriver = self.__dict__.get("_deriver")
        if deriver is None:
            raise RuntimeError("this trace does not know the model it came from (it was made by hand, or unpickled); "
                               "call core.layer_detail(model, trace, layer)")
        return deriver(self, int(layer))

    def attention(self, layer: int) -> np.ndarray:
        """[H, T, T] float32: one layer's attention weights, after mask and softmax."""
        return self.layer(layer).attn_pattern.astype(np.float32)

    def _derive(self, site: str) -> np.ndarray | None:
        """Every layer's ``site``, stacked [L, …], derived once and kept on this object; None for a trace
        that cannot derive (made without a model)."""
        derived = self.__dict__.setdefault("_derived", {})
        if site in derived:
            return derived[site]
        if self.__dict__.get("_deriver") is None:
            return None
        if site == "attn_pattern" and self.n_tokens > PATTERN_EXPORT_MAX:
            raise SiteTooLargeError(
                f"attn_pattern of a {self.n_tokens:,}-token trace would take {self.site_bytes(site) / 1e9:.1f} GB "
                f"({self.n_layers} layers × {self.n_heads} heads × {self.n_tokens:,}² weights × 2 bytes); it is given "
                f"for up to {PATTERN_EXPORT_MAX:,} tokens. Read one layer at a time: tr.attention(layer) → [H, T, T].")
        out = np.stack([self.site(site, layer) for layer in range(self.n_layers)])
        out.flags.writeable = False
        derived[site] = out
        return out

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
        ``layers``: the per-layer sites stacked over layers (``LAYER_SITES``: attn_pattern only up to
        ``PATTERN_EXPORT_MAX`` tokens), as ``core.backends.export_npz`` derives them;
        by default the arrays this trace keeps itself (the toy). A key left out is named in
        ``meta["omitted"]`` with the reason.
        """
        arrays: dict[str, np.ndarray] = {}
        omitted: dict[str, str] = {}
        for key in ARRAY_KEYS:
            val = (layers or {}).get(key, self._stored(key))
            if val is None:
                omitted[key] = (f"attention weights of a {self.n_tokens}-token trace would take "
                                f"{self.site_bytes('attn_pattern') / 1e9:.1f} GB; exported up to "
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
