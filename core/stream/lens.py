"""Reading the residual stream: norms, the logit lens, and one block's norm and MLP redone by hand.

Everything here starts from a cached ``Trace`` plus the model's *weights* (read, never changed).
The only forward computation on the shared model is the logit lens, which runs the final norm and
the LM head (not the blocks) under ``loaded.lock``; the cached wrapper is ``core.cached_stream``.

The by-hand functions (``norm_steps``, ``mlp_steps``) are plain numpy on purpose: tests compare
them with the model's own modules and with the traced ``mlp_out``, so the page's numbers are the
model's numbers, not an illustration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.engine.roles import find_sites
from core.engine.tokens import visible_tokens, window
from core.engine.trace import SiteReader, Trace
from core.engine.types import LoadedModel, UnsupportedArchitectureError

# ---------------------------------------------------------------------------------------------
# norms of the stream (pure, from the trace)


def stream_norms(tr: Trace) -> np.ndarray:
    """‖resid[l, t]‖₂ for every layer boundary and token: [L+1, T] (in float64, one boundary at a time:
    a 4,096-token stream is 290 MB in float32)."""
    return np.stack([np.linalg.norm(r.astype(np.float64), axis=-1) for r in tr.resid])


def sublayer_norms(tr: Trace, pos: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """‖attn_out‖ and ‖mlp_out‖ per layer ([L] each): at token ``pos``, or the mean over tokens."""
    a = tr.attn_out_norm.astype(np.float64)  # [L, T], taken as the model ran
    m = tr.mlp_out_norm.astype(np.float64)  # [L, T]
    if pos is None:
        return a.mean(axis=1), m.mean(axis=1)
    return a[:, pos], m[:, pos]


def _check_pre_norm(loaded: LoadedModel) -> None:
    # Only a pre-norm block reads resid[l] through its norms; post-norm puts the norm on the stream.
    if loaded.facts.norm_placement != "pre-norm":
        raise UnsupportedArchitectureError("post_norm_view")


def _w(param: Any) -> np.ndarray | None:
    """A weight as a read-only float32 numpy view (no copy for float32 CPU tensors)."""
    if param is None:
        return None
    return param.detach().float().cpu().numpy()


# ---------------------------------------------------------------------------------------------
# the logit lens


def _lens_topk(loaded: LoadedModel, tr: Trace, k: int, batch: int, lo: int, hi: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """The k best tokens (ids [L+1, T', k] int64, probabilities [L+1, T', k] float32, best first) of every
    layer boundary's stream read through the final norm and the LM head, positions lo … hi−1; and lo."""
    if k < 1:
        raise ValueError("k must be at least 1")
    sites = find_sites(loaded.model)
    norm, head = sites.require_final_norm(), sites.lm_head
    hi = tr.resid.shape[1] if hi is None else min(hi, tr.resid.shape[1])
    lo = max(0, min(lo, hi - 1))
    n_rows, T = tr.resid.shape[0], hi - lo
    k = min(int(k), int(loaded.facts.vocab_size))
    top_ids = np.zeros((n_rows, T, k), dtype=np.int64)
    top_probs = np.zeros((n_rows, T, k), dtype=np.float32)
    with loaded.lock, torch.inference_mode():
        for start in range(0, n_rows, batch):
            x = torch.from_numpy(np.array(tr.resid[start : start + batch, lo:hi]))  # [b, T', d]
            logits = head(norm(x)).float()  # [b, T', V]
            probs = torch.softmax(logits, dim=-1)
            p, i = (probs.max(dim=-1, keepdim=True) if k == 1 else probs.topk(k, dim=-1))  # [b, T', k], best first
            top_ids[start : start + batch] = i.numpy()
            top_probs[start : start + batch] = p.numpy()
    return top_ids, top_probs, lo


def lens_probs_of(loaded: LoadedModel, tr: Trace, pos: int, ids: list[int] | tuple[int, ...], batch: int = 4) -> np.ndarray:
    """The lens probability of each token of ``ids`` at every layer boundary, position ``pos``: [L+1, n] float32,
    computed exactly as ``logit_lens_topk(lo=pos, hi=pos + 1)`` computes its top k (same batches, same ops), so
    a token's curve across the layers equals the lens' probability wherever that token is in the top k."""
    sites = find_sites(loaded.model)
    norm, head = sites.require_final_norm(), sites.lm_head
    n_rows, cols = tr.resid.shape[0], list(ids)
    out = np.zeros((n_rows, len(cols)), dtype=np.float32)
    with loaded.lock, torch.inference_mode():
        for start in range(0, n_rows, batch):
            x = torch.from_numpy(np.array(tr.resid[start : start + batch, pos : pos + 1]))  # [b, 1, d]
            probs = torch.softmax(head(norm(x)).float(), dim=-1)  # [b, 1, V]
            out[start : start + batch] = probs[:, 0, cols].numpy()
    return out


def logit_lens(loaded: LoadedModel, tr: Trace, batch: int = 4, lo: int = 0, hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Read every layer's residual stream as if it were the last: final norm → LM head → softmax.

    Returns ``top_ids`` [L+1, T'] (int64) and ``top_probs`` [L+1, T'] (float32) for the positions
    lo … hi−1 (all by default: at 4,096 tokens all of them would cost 31 LM-head passes over 4,096
    rows, so pages ask for the window they show). Row L is the stream leaving the last block, so it
    is exactly the model's own next-token prediction. Layers go through in small batches so at most
    ``batch × T' × V`` logits exist at once. The top k with their probabilities: ``logit_lens_topk``.
    """
    ids, probs, _ = _lens_topk(loaded, tr, 1, batch, lo, hi)
    return ids[..., 0], probs[..., 0]


@dataclass(frozen=True)
class LensTopK:
    """The logit lens' k best tokens at every layer boundary and position of a window (``logit_lens_topk``)."""

    ids: np.ndarray  # [L+1, T', k] int64, best first; row l reads resid[l] (row L: the model's own prediction)
    probs: np.ndarray  # [L+1, T', k] float32, their softmax probabilities
    tokens: np.ndarray  # [L+1, T', k] str: each id decoded alone, made visible (␣ for a space)
    lo: int  # the trace position of column 0

    def at(self, pos: int) -> list[list[tuple[str, float]]]:
        """Position ``pos`` of the trace: for each layer boundary, its (token, probability) pairs, best first."""
        j = int(pos) - self.lo
        if not 0 <= j < self.ids.shape[1]:
            raise IndexError(f"position {pos} is outside this lens' window {self.lo} … {self.lo + self.ids.shape[1] - 1}")
        return [[(str(s), float(p)) for s, p in zip(self.tokens[l, j], self.probs[l, j])] for l in range(self.ids.shape[0])]


def logit_lens_topk(loaded: LoadedModel, tr: Trace, k: int = 5, lo: int = 0, hi: int | None = None, batch: int = 4) -> LensTopK:
    """The logit lens with the ``k`` best next tokens of every layer boundary and position lo … hi−1, and
    their probabilities (final norm → LM head → softmax over the whole vocabulary): ``k=1`` is exactly
    what ``logit_lens`` (the page's figure) returns."""
    ids, probs, lo = _lens_topk(loaded, tr, k, batch, lo, hi)
    uniq = np.unique(ids).tolist()
    text = dict(zip(uniq, visible_tokens(loaded.tokenizer, uniq)))
    tokens = np.asarray([text[i] for i in ids.ravel().tolist()], dtype=object).reshape(ids.shape)
    return LensTopK(ids, probs, tokens, lo)


LENS_WINDOW = 16  # positions the lens figure shows at once; a longer prompt gets a window slider
LENS_MAX = 64  # the widest window read at once (each position is 31 LM-head rows)


@dataclass(frozen=True)
class LensView:
    """The positions [offset, offset + T') of a logit lens, ready for the figure."""

    ids: np.ndarray  # [L+1, T'] top ids
    probs: np.ndarray  # [L+1, T'] their probabilities
    cells: list[str]  # [(L+1)·T'] their text, row by row
    tokens: list[str]  # [T'] the prompt's tokens in the window
    offset: int


def lens_view(ids: np.ndarray, probs: np.ndarray, cells: list[str], tokens: Any, lo: int, hi: int, first: int = 0) -> LensView:
    """Positions lo … hi−1 (at least one) of the lens ``ids``/``probs`` [L+1, T] and ``cells`` [(L+1)·T],
    whose column 0 is position ``first`` (a lens computed for a window only)."""
    hi = max(hi, lo + 1)
    a, b = lo - first, hi - first
    grid = np.asarray(cells, dtype=object).reshape(ids.shape)[:, a:b]
    return LensView(ids[:, a:b], probs[:, a:b], grid.ravel().tolist(), window(tokens, lo, hi), lo)  # the window keeps its neighbours for labels



def logit_lens_with_text(loaded: LoadedModel, tr: Trace, lo: int = 0, hi: int | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``logit_lens`` of positions lo … hi−1 plus each cell's token as a page shows it (row-major,
    [(L+1)·T']); every distinct id is decoded once."""
    ids, probs = logit_lens(loaded, tr, lo=lo, hi=hi)
    uniq = np.unique(ids).tolist()
    text = dict(zip(uniq, visible_tokens(loaded.tokenizer, uniq)))
    return ids, probs, [text[i] for i in ids.ravel().tolist()]

# ---------------------------------------------------------------------------------------------
# one norm, by hand


@dataclass(frozen=True)
class NormSteps:
    kind: str  # "RMSNorm" | "LayerNorm"
    x: np.ndarray  # [d] the input vector
    centred: np.ndarray  # [d] x − mean (LayerNorm) or x itself (RMSNorm)
    rms_in: float  # root-mean-square of x
    scale: float  # the divisor: sqrt(mean(centred²) + eps)
    normed: np.ndarray  # [d] centred / scale: rms ≈ 1
    weight: np.ndarray  # [d] the learned gain
    out: np.ndarray  # [d] normed × weight (+ bias)
    eps: float

    @property
    def rms_normed(self) -> float:
        return float(np.sqrt(np.mean(self.normed.astype(np.float64) ** 2)))

    @property
    def rms_out(self) -> float:
        return float(np.sqrt(np.mean(self.out.astype(np.float64) ** 2)))


def norm_steps(module: torch.nn.Module, x: np.ndarray) -> NormSteps:
    """What a norm module does to one vector, step by step, from its weights (float64 maths)."""
    w = _w(getattr(module, "weight", None))
    b = _w(getattr(module, "bias", None))
    eps = float(getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)))
    is_ln = "LayerNorm" in type(module).__name__ and "RMS" not in type(module).__name__
    x64 = np.asarray(x, dtype=np.float64)  # [d]
    centred = x64 - x64.mean() if is_ln else x64  # LayerNorm centres first; RMSNorm does not
    scale = float(np.sqrt(np.mean(centred**2) + eps))
    normed = centred / scale
    weight = np.ones_like(normed) if w is None else w.astype(np.float64)
    # Gemma-style norms store (gain − 1): they multiply by (1 + weight)
    if type(module).__name__.startswith("Gemma"):
        weight = 1.0 + weight
    out = normed * weight + (0.0 if b is None else b.astype(np.float64))
    return NormSteps(
        kind="LayerNorm" if is_ln else "RMSNorm",
        x=x64,
        centred=centred,
        rms_in=float(np.sqrt(np.mean(x64**2))),
        scale=scale,
        normed=normed,
        weight=weight,
        out=out,
        eps=eps,
    )


def block_norm_steps(loaded: LoadedModel, tr: Trace, layer: int, pos: int, which: str = "attn",
                     site: SiteReader | None = None) -> NormSteps:
    """The pre-attention norm reads resid[l, t]; the pre-MLP norm reads resid_mid = resid + attn_out
    (read through ``site``, default ``tr.site``)."""
    _check_pre_norm(loaded)
    if which == "attn":
        x = tr.resid[layer, pos]
    else:
        x = tr.resid[layer, pos] + (site or tr.site)("attn_out", layer)[pos]
    return norm_steps(find_sites(loaded.model).block_norm(layer, which), x)


def norm_metrics(s: NormSteps) -> list[tuple[str, str]]:
    """(i18n key, value) of the three RMS figures: the input, after normalising (≈ 1), after the gain; four
    decimals each, as the titles of the figure under them (``fig_norm_steps``)."""
    return [("residual.rms_in", f"{s.rms_in:.4f}"), ("residual.rms_hat", f"{s.rms_normed:.4f}"), ("residual.rms_out", f"{s.rms_out:.4f}")]


# ---------------------------------------------------------------------------------------------
# one SwiGLU MLP, by hand


@dataclass(frozen=True)
class MlpSteps:
    h: np.ndarray  # [d] the normed input of the MLP
    gate: np.ndarray  # [d_ff] gate_proj(h)
    act: np.ndarray  # [d_ff] SiLU(gate)
    up: np.ndarray  # [d_ff] up_proj(h)
    prod: np.ndarray  # [d_ff] SiLU(gate) · up: the neuron activations
    out: np.ndarray  # [d] down_proj(prod): what the MLP adds to the stream
    traced: np.ndarray  # [d] trace.mlp_out[l, t], for comparison
    traced_act: np.ndarray | None = None  # [d_ff] the model's own gate activation (site gate_act), for comparison

    @property
    def act_diff(self) -> float | None:
        """max |SiLU(gate) by hand − the model's own gate_act| (None: the model's MLP records no gate_act)."""
        return None if self.traced_act is None else float(np.max(np.abs(self.act - self.traced_act)))

    @property
    def max_abs_diff(self) -> float:
        return float(np.max(np.abs(self.out - self.traced)))

    def n_for_mass(self, share: float = 0.9) -> int:
        """How many neurons (largest |activation| first) carry ``share`` of the total |activation|."""
        mass = np.cumsum(np.sort(np.abs(self.prod))[::-1])
        return int(np.searchsorted(mass, share * mass[-1]) + 1)

    def top_neurons(self, n: int = 20) -> np.ndarray:
        """Indices of the n neurons with the largest |SiLU(gate)·up|, largest first."""
        return np.argsort(-np.abs(self.prod), kind="stable")[:n]

    def args(self, share: float = 0.9) -> dict[str, Any]:
        """The fields of residual.mlp_active (neurons carrying ``share`` of the activation, of d_ff) and
        residual.mlp_check (the gap to the traced mlp_out, beside its scale)."""
        return {"k": self.n_for_mass(share), "ff": len(self.prod), "diff": f"{self.max_abs_diff:.2e}",
                "scale": f"{np.abs(self.traced).max():.3g}"}


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU(x) = x · sigmoid(x), written stably for large |x|."""
    return x * (0.5 * (1.0 + np.tanh(0.5 * x)))


def mlp_steps(loaded: LoadedModel, tr: Trace, layer: int, pos: int, site: SiteReader | None = None,
              own_act: bool = True) -> MlpSteps:
    """down_proj(SiLU(gate_proj(h)) · up_proj(h)) for token ``pos`` of block ``layer``, from the weights, beside
    the model's own ``mlp_out`` and (``own_act``) ``gate_act`` (read through ``site``, default ``tr.site``; a
    derived site, replayed over every position of the layer when it is not yet at hand).

    h = post_attention_layernorm(resid[l, t] + attn_out[l, t]), recomputed by ``norm_steps``.
    """
    mlp = find_sites(loaded.model).mlps[layer]
    if mlp is None or not all(getattr(mlp, n, None) is not None for n in ("gate_proj", "up_proj", "down_proj")):
        raise UnsupportedArchitectureError("mlp_not_gated", model=type(loaded.model).__name__)
    if str(loaded.facts.activation).lower() not in ("silu", "swish"):
        raise UnsupportedArchitectureError("gate_not_silu", act=loaded.facts.activation)
    at = site or tr.site
    h = block_norm_steps(loaded, tr, layer, pos, "mlp", at).out  # [d]

    def lin(m: Any, v: np.ndarray) -> np.ndarray:
        y = _w(m.weight).astype(np.float64) @ v  # weight [out, in] · [in]
        return y if m.bias is None else y + _w(m.bias)

    gate = lin(mlp.gate_proj, h)  # [d_ff]
    up = lin(mlp.up_proj, h)  # [d_ff]
    act = silu(gate)
    prod = act * up
    out = lin(mlp.down_proj, prod)  # [d]
    try:
        traced_act = at("gate_act", layer)[pos].astype(np.float64) if own_act else None
    except KeyError:  # an MLP without a part recorded as gate_act
        traced_act = None
    return MlpSteps(h=h, gate=gate, act=act, up=up, prod=prod, out=out, traced=at("mlp_out", layer)[pos].astype(np.float64),
                    traced_act=traced_act)


# ---------------------------------------------------------------------------------------------
# the block diagram


def block_facts(tr: Trace, loaded: LoadedModel) -> dict[str, Any]:
    """The facts the block diagram is drawn with: the trace's own, else the loaded model's."""
    return tr.meta.get("facts", {}) or loaded.facts.to_dict()
