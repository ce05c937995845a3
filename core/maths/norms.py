"""Normalisation: LayerNorm against RMSNorm on one vector, and Pre-Norm against Post-Norm on a stack.

LayerNorm (Ba et al. 2016) centres a vector and divides by its standard deviation; RMSNorm (Zhang &
Sennrich 2019) only divides by the root mean square (weight 1, bias 0 here). Post-Norm (the 2017
Transformer, BERT), ``Norm(x + Sublayer(x))``, resets the stream's size after every sub-layer; Pre-Norm
(GPT-2, Llama, SmolLM2), ``x + Sublayer(Norm(x))``, only adds to it, so its size grows with depth: measured
on seeded untrained toys of each placement and on the real model's traced stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from core.engine.trace import Trace
from core.toy.model import NORMS, PLACEMENTS, ToyConfig, ToyTransformer

EPS = 1e-5  # LayerNorm's and SmolLM2's RMSNorm's epsilon (rms_norm_eps); the toys use the same
GROWTH_LAYERS = 24  # blocks in the growth toys
GROWTH_TOKENS = 16  # positions of the growth toys' input
GROWTH_D = 64  # d_model of the growth toys: a normalised vector has ‖x‖ = √64 = 8
GROWTH_SEED = 0


def layer_norm(x: np.ndarray, eps: float = EPS) -> np.ndarray:
    """(x − mean(x)) / √(var(x) + eps) over the last axis (weight 1, bias 0), in float64."""
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)  # the biased variance, as torch.nn.LayerNorm uses
    return (x - mu) / np.sqrt(var + eps)


def rms_norm(x: np.ndarray, eps: float = EPS) -> np.ndarray:
    """x / √(mean(x²) + eps) over the last axis (weight 1), in float64: no mean is subtracted."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps)


def rms(x: np.ndarray) -> float:
    """√mean(x²) of one vector."""
    x = np.asarray(x, dtype=np.float64)
    return float(np.sqrt((x**2).mean()))


@dataclass(frozen=True)
class NormCompare:
    """One vector (after an optional shift and scale of every component) and what each norm makes of it."""

    x: np.ndarray  # [d] the vector the norms read (float64)
    layer: np.ndarray  # [d] LayerNorm(x)
    rms: np.ndarray  # [d] RMSNorm(x)

    def stats(self) -> dict[str, dict[str, float]]:
        """mean, standard deviation and RMS of the input and of each output."""
        return {name: {"mean": float(v.mean()), "std": float(v.std()), "rms": rms(v)}
                for name, v in (("x", self.x), ("layernorm", self.layer), ("rmsnorm", self.rms))}


def compare(x: np.ndarray, shift: float = 0.0, scale: float = 1.0, eps: float = EPS) -> NormCompare:
    """Both norms on ``scale · x + shift``. A shift changes RMSNorm's output but not LayerNorm's (it
    subtracts the mean); a scale changes neither (both divide by a size), up to eps."""
    v = np.asarray(x, dtype=np.float64) * scale + shift
    return NormCompare(v, layer_norm(v, eps), rms_norm(v, eps))


def stats_rows(c: NormCompare) -> list[tuple[str, float, float, float]]:
    """(which, mean, std, RMS) rows for the table under the figure."""
    s = c.stats()
    return [(k, s[k]["mean"], s[k]["std"], s[k]["rms"]) for k in ("x", "layernorm", "rmsnorm")]


# ---------------------------------------------------------------------------------------------
# where the norm sits: the residual stream's size through the blocks


def growth_config(placement: str, norm: str = "layernorm", n_layers: int = GROWTH_LAYERS) -> ToyConfig:
    """The growth toy: GROWTH_D wide, ``n_layers`` blocks, the given placement and norm (RoPE, SwiGLU)."""
    if placement not in PLACEMENTS or norm not in NORMS:
        raise ValueError(f"placement must be one of {PLACEMENTS} and norm one of {NORMS}")
    return ToyConfig(d_model=GROWTH_D, n_layers=n_layers, n_heads=4, n_kv_heads=4, d_ff=4 * GROWTH_D, position="rope",
                     norm=norm, norm_placement=placement, max_positions=max(64, GROWTH_TOKENS), eps=EPS)


def growth_toy(placement: str, norm: str = "layernorm", n_layers: int = GROWTH_LAYERS,
               seed: int = GROWTH_SEED) -> ToyTransformer:
    """A toy of that placement, randomly initialised by PyTorch's default initialisation from ``seed``
    (no training: what the placement alone does)."""
    with torch.random.fork_rng(devices=[]):  # the global generator is left as it was found
        torch.manual_seed(seed)
        return ToyTransformer(growth_config(placement, norm, n_layers)).eval()


def growth_input(seed: int = GROWTH_SEED, n_tokens: int = GROWTH_TOKENS) -> torch.Tensor:
    """[1, T] the byte ids every growth toy reads (drawn from ``seed``)."""
    return torch.randint(0, 256, (1, n_tokens), generator=torch.Generator().manual_seed(seed))


def stream_of(model: ToyTransformer, ids: torch.Tensor) -> np.ndarray:
    """[L+1, T, d] the residual stream entering block 0 … leaving the last block, read from the toy's probes."""
    probes: dict = {}
    with torch.inference_mode():
        model(ids, probes=probes)
    return probes["resid"].double().numpy()  # [L+1, T, d]: the toy probes every block boundary (H1, issue 27)


def mean_norms(stream: np.ndarray) -> np.ndarray:
    """[L+1] the L2 norm ‖x‖ of every position's vector at each block boundary, averaged over positions."""
    # one boundary at a time (the same float64 operations on each row as on the whole array, so the same bits),
    # never the whole stream in float64 (and its square) at once
    return np.array([np.sqrt((np.asarray(layer, dtype=np.float64) ** 2).sum(-1)).mean(-1) for layer in stream])


@lru_cache(maxsize=8)  # seconds of CPU for two 24-block toys; the arrays come back read-only, shared by every session
def growth(norm: str = "layernorm", n_layers: int = GROWTH_LAYERS, seed: int = GROWTH_SEED) -> dict[str, np.ndarray]:
    """placement → [L+1] mean ‖x‖ per block boundary, for a seeded toy of each placement on one input."""
    ids = growth_input(seed)
    out = {p: mean_norms(stream_of(growth_toy(p, norm, n_layers, seed), ids)) for p in PLACEMENTS}
    for v in out.values():
        v.flags.writeable = False
    return out


def trace_norms(tr: Trace) -> np.ndarray:
    """[L+1] mean ‖x‖ per block boundary of a traced model's residual stream (before its final norm)."""
    return mean_norms(tr.resid)


def growth_readout(g: dict[str, np.ndarray]) -> dict[str, str]:
    """The numbers the caption quotes: each placement's first and last ‖x‖ and their ratio."""
    out = {}
    for p, v in g.items():
        out[f"{p}_first"], out[f"{p}_last"], out[f"{p}_ratio"] = f"{v[0]:.2f}", f"{v[-1]:.2f}", f"{v[-1] / v[0]:.2f}"
    out["sqrt_d"] = f"{np.sqrt(GROWTH_D):g}"
    out["layers"] = str(len(next(iter(g.values()))) - 1)
    return out
