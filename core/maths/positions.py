"""Position information: the original sinusoidal encoding, a learned table, RoPE (rotary position
embedding) as the real Llama-family models apply it, and ALiBi (a per-head linear bias on the scores).

Self-attention alone is order-blind: permute the tokens and every position gets the same set of
scores. The original Transformer *adds* a sinusoidal vector to each embedding; GPT-2 adds a
*learned* one; Llama/Qwen/SmolLM2 instead *rotate* q and k inside attention, so that q·k depends on
the relative offset m − n only; ALiBi (BLOOM, MPT) adds nothing to the vectors at all and instead
subtracts m_h · (i − j) from head h's score of query i for key j, so far keys are penalised linearly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import GPT2Config

import core.backends as backends
from core.common import i18n
from core.common.numbers import max_abs_diff, softmax
from core.engine.roles import find_sites
from core.engine.trace import SiteReader, Trace
from core.engine.types import LoadedModel, ModelFacts
from core.toy.model import ToyConfig, ToyTransformer

DEFAULT_THETA = 10000.0  # RoPE's base when a model names none (and the sinusoidal encoding's)
DEFAULT_HEAD_DIM = 64  # the RoPE demo's head size when no model is loaded
PAIR_POSITIONS = 32  # positions the rotating-pair figure draws
OFFSET_PAIRS = ((5, 2), (105, 102), (1005, 1002), (5, 4))  # (m, n): three with m − n = 3, one with 1
ALIBI_HEADS = 8  # the ALiBi demo's default head count (the paper's slopes for 8 heads: 1/2 … 1/256)
ALIBI_DH = 16  # head size of the ALiBi demo's seeded q, k
LEARNED_D = 16  # width of the learned-table demo
LEARNED_READ = 4  # rows the learned-table demo reads: positions start … start + 3


def sinusoidal(T: int, d: int, base: float = 10000.0) -> np.ndarray:
    """[T, d] the "Attention Is All You Need" encoding:
    PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(pos / base^(2i/d))."""
    if T <= 0 or d <= 0 or d % 2:
        raise ValueError("T must be positive and d a positive even number")
    pos = np.arange(T, dtype=np.float64)[:, None]  # [T, 1]
    two_i = np.arange(0, d, 2, dtype=np.float64)[None, :]  # [1, d/2]
    angle = pos / base ** (two_i / d)  # [T, d/2]: low dimensions turn fast, high ones slowly
    pe = np.empty((T, d))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return pe


def rope_inv_freq(head_dim: int, theta: float = 10000.0) -> np.ndarray:
    """[dh/2] θ_i = theta^(−2i/dh): the angle per position step of pair i (HF's inv_freq)."""
    if head_dim % 2:
        raise ValueError("RoPE needs an even head_dim")
    return 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def rope_angles(positions: np.ndarray, head_dim: int, theta: float = 10000.0) -> np.ndarray:
    """[T, dh/2] the rotation angle pos·θ_i of every pair at every position."""
    return np.asarray(positions, dtype=np.float64)[:, None] * rope_inv_freq(head_dim, theta)[None, :]


def rotate_half(x: np.ndarray) -> np.ndarray:
    """HF's Llama convention: pair i is (x[i], x[i + dh/2]), so rotating by 90° maps
    (x1, x2) → (−x2, x1) with the halves concatenated."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope_rotate(x: np.ndarray, positions: Any, theta: float = 10000.0) -> np.ndarray:
    """Apply RoPE to x [..., T, dh] at ``positions`` [T] (or one int for a single vector [dh]).

    Each pair (x[i], x[i+dh/2]) turns by the angle pos·θ_i:
    out = x·cos + rotate_half(x)·sin, with cos/sin repeated over both halves (as in
    transformers' ``apply_rotary_pos_emb``)."""
    x = np.asarray(x, dtype=np.float64)
    single = np.ndim(positions) == 0
    pos = np.atleast_1d(np.asarray(positions, dtype=np.float64))
    ang = rope_angles(pos, x.shape[-1], theta)  # [T, dh/2]
    ang = np.concatenate([ang, ang], axis=-1)  # [T, dh]: both halves of a pair share an angle
    if single:
        ang = ang[0]  # [dh]
    return x * np.cos(ang) + rotate_half(x) * np.sin(ang)


def rope_score(q: np.ndarray, k: np.ndarray, m: int, n: int, theta: float = 10000.0) -> float:
    """q placed at position m, k at position n, both rotated: their dot product."""
    return float(rope_rotate(q, m, theta) @ rope_rotate(k, n, theta))


def relative_offset_table(q: np.ndarray, k: np.ndarray, offsets: list[int], shifts: list[int], theta: float = 10000.0) -> np.ndarray:
    """[len(offsets), len(shifts)] score of q at m = s + offset and k at n = s, for every shift s:
    each row is constant, because RoPE scores depend only on m − n."""
    return np.array([[rope_score(q, k, s + o, s, theta) for s in shifts] for o in offsets])


def pair_trajectory(pair: tuple[float, float], positions: np.ndarray, theta_i: float) -> np.ndarray:
    """[T, 2] one 2-D pair (x1, x2) rotated by pos·θ_i at each position: a point on a circle."""
    a = np.asarray(positions, dtype=np.float64) * theta_i
    x1, x2 = pair
    return np.stack([x1 * np.cos(a) - x2 * np.sin(a), x1 * np.sin(a) + x2 * np.cos(a)], axis=-1)


def pre_rope_q(loaded: LoadedModel, resid_in: np.ndarray, layer: int) -> np.ndarray:
    """[H, T, dh] the queries of ``layer`` *before* RoPE: q_proj(input_layernorm(resid)),
    computed from the real model's weights and the traced residual stream entering the block.
    Raises ValueError for a model without Llama-style ``input_layernorm`` / ``self_attn.q_proj``."""
    block = find_sites(loaded.model).blocks[layer]
    norm = getattr(block, "input_layernorm", None)
    proj = getattr(getattr(block, "self_attn", None), "q_proj", None)
    if norm is None or proj is None:
        raise ValueError(f"{type(block).__name__} has no input_layernorm / self_attn.q_proj")
    H, dh = loaded.facts.n_heads, loaded.facts.head_dim
    with loaded.lock, torch.inference_mode():
        x = torch.from_numpy(np.array(resid_in, dtype=np.float32))[None]  # [1, T, d]
        q = proj(norm(x))[0]  # [T, H·dh]
    T = q.shape[0]
    return q.reshape(T, H, dh).permute(1, 0, 2).float().numpy()  # [H, T, dh]


def sinusoidal_entry(pos: int, i: int, d: int, base: float = 10000.0) -> tuple[float, float]:
    """The formula itself for one pair, scalar maths (an independent check of ``sinusoidal``):
    (sin(pos / base^(2i/d)), cos(pos / base^(2i/d)))."""
    a = pos / base ** (2 * i / d)
    return math.sin(a), math.cos(a)


def relative_demo(head_dim: int = 64, theta: float = 10000.0, seed: int = 0,
                  offsets: tuple[int, ...] = (0, 1, 3, 16), shifts: tuple[int, ...] = tuple(range(0, 101, 5))) -> dict[str, Any]:
    """Seeded random q, k; the RoPE score for every offset m − n at every shift of both positions. The
    default offsets hold both of OFFSET_PAIRS' (1 and 3), so every row of the table under it is a line on it."""
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal(head_dim), rng.standard_normal(head_dim)
    return {"q": q, "k": k, "offsets": list(offsets), "shifts": list(shifts),
            "table": relative_offset_table(q, k, list(offsets), list(shifts), theta)}


# ---------------------------------------------------------------------------------------------
# what the positions page shows, as pure functions


def rope_params(facts: ModelFacts | None) -> tuple[float, int]:
    """(theta, head_dim) for the RoPE demos: the loaded model's, or the defaults without one."""
    if facts is None:
        return DEFAULT_THETA, DEFAULT_HEAD_DIM
    return float(facts.rope_theta or DEFAULT_THETA), facts.head_dim


def rope_checkable(loaded: LoadedModel) -> bool:
    """Can ``pre_rope_q`` + ``rope_rotate`` be checked against this model's traced queries?"""
    return loaded.facts.position_type == "RoPE" and backends.is_hf(loaded)


def methods_table(lang: str) -> pd.DataFrame:
    """Sinusoidal vs learned vs RoPE vs ALiBi: where each enters, and whether scores see relative offsets."""
    cols = [i18n.t(f"positions.col_{c}", lang) for c in ("method", "where", "relative", "examples")]
    return pd.DataFrame([[i18n.t(f"positions.row_{m}_{c}", lang) for c in ("name", "where", "relative", "examples")]
                         for m in ("sin", "learned", "rope", "alibi")], columns=cols)


def sinusoidal_check_text(pe: np.ndarray, lang: str) -> str:
    """One pair of ``pe`` (position ≤ 5, pair ≤ 3) beside the formula computed by hand."""
    T, d = pe.shape
    p, i = min(5, T - 1), min(3, d // 2 - 1)
    s, c = sinusoidal_entry(p, i, d)
    return i18n.t("positions.sin_check", lang, p=p, i=2 * i, j=2 * i + 1, a=f"{pe[p, 2 * i]:.6f}", b=f"{s:.6f}",
                  c=f"{pe[p, 2 * i + 1]:.6f}", e=f"{c:.6f}")


def rope_pair_demo(head_dim: int, theta: float, pair: int, n_positions: int = PAIR_POSITIONS) -> tuple[float, np.ndarray]:
    """(θ_i, [n, 2] path) of pair ``pair`` starting at (1, 0), over positions 0 … n − 1."""
    th_i = float(rope_inv_freq(head_dim, theta)[pair])
    return th_i, pair_trajectory((1.0, 0.0), np.arange(n_positions), th_i)


def pair_caption(head_dim: int, pair: int, pos: int, theta_i: float, lang: str) -> str:
    """Which two dimensions form the pair (HF's halves convention), its θ_i, and its angle at ``pos``."""
    return i18n.t("positions.pair_caption", lang, i=pair, j=pair + head_dim // 2, th=f"{theta_i:.4g}", p=pos,
                  a=f"{pos * theta_i:.4f}")


def offset_pairs_table(q: np.ndarray, k: np.ndarray, theta: float = DEFAULT_THETA,
                       pairs: tuple[tuple[int, int], ...] = OFFSET_PAIRS) -> pd.DataFrame:
    """q at m, k at n, for each (m, n): equal offsets give equal scores, however far along."""
    return pd.DataFrame({"(m, n)": [str(mn) for mn in pairs], "m − n": [m - n for m, n in pairs],
                         "q·k": [rope_score(q, k, m, n, theta) for m, n in pairs]})


def rope_check_readout(check: dict[str, np.ndarray], q_traced: np.ndarray) -> dict[str, str]:
    """The gap of RoPE(pre-RoPE q) to the traced q, and of the unrotated q: tiny vs large."""
    return {"rotated": f"{float(check['max_diff']):.2e}", "raw": f"{max_abs_diff(check['raw'], q_traced):.3g}"}


def rope_check(loaded: LoadedModel, tr: Trace, layer: int, site: SiteReader | None = None) -> dict[str, np.ndarray]:
    """Pre-RoPE q of layer ``layer`` from the weights, rotated here, and the gap to the traced (post-RoPE) q
    (read through ``site``, default ``tr.site``). Raises ValueError for models without Llama-style q_proj."""
    raw = pre_rope_q(loaded, tr.resid[layer], layer)  # [H, T, dh]
    rotated = rope_rotate(raw, np.arange(raw.shape[1]), rope_params(loaded.facts)[0])  # [H, T, dh]
    return {"raw": raw, "rotated": rotated, "max_diff": np.array(max_abs_diff(rotated, (site or tr.site)("q", layer)))}


# ---------------------------------------------------------------------------------------------
# ALiBi: a linear bias on the scores, one slope per head (Press et al. 2021, "Train Short, Test Long")


def _pow2_slopes(n: int) -> np.ndarray:
    return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)  # [n] 2^(−8h/n), h = 1 … n: a geometric sequence


def alibi_slopes(n_heads: int) -> np.ndarray:
    """[H] the slope m_h of each head. For H a power of two, the paper's geometric sequence
    m_h = 2^(−8h/H), h = 1 … H (H = 8: 1/2, 1/4, …, 1/256). For another H, the rule of the paper's own
    code: the slopes of the largest power of two n < H, then every other slope of 2n for the rest."""
    if n_heads <= 0:
        raise ValueError("n_heads must be positive")
    n = 2 ** math.floor(math.log2(n_heads))
    if n == n_heads:
        return _pow2_slopes(n)
    return np.concatenate([_pow2_slopes(n), _pow2_slopes(2 * n)[0::2][: n_heads - n]])


def alibi_bias(slopes: np.ndarray, T: int, causal: bool = True) -> np.ndarray:
    """[H, T, T] what ALiBi adds to head h's scores: −m_h · (i − j) for query i and key j ≤ i (0 on the
    diagonal, −m_h for the previous token, …); with ``causal``, −∞ above the diagonal (the mask)."""
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    dist = (i - j).astype(np.float64)  # [T, T] how far back key j lies from query i
    bias = -np.asarray(slopes, dtype=np.float64)[:, None, None] * dist[None]  # [H, T, T]
    if causal:
        bias = np.where((j > i)[None], -np.inf, bias)
    return bias


@dataclass(frozen=True)
class AlibiDemo:
    """Seeded q, k (or equal scores), the ALiBi bias of every head, and the weights with and without it."""

    q: np.ndarray  # [T, dh]
    k: np.ndarray  # [T, dh]
    slopes: np.ndarray  # [H]
    scores: np.ndarray  # [T, T] q·kᵀ/√dh (the same content scores for every head)
    bias: np.ndarray  # [H, T, T] ALiBi + causal mask
    plain: np.ndarray  # [T, T] softmax(scores + causal mask): no position information at all
    weights: np.ndarray  # [H, T, T] softmax(scores + bias)


def alibi_demo(n_heads: int = ALIBI_HEADS, T: int = 8, flat: bool = False, seed: int = 0, dh: int = ALIBI_DH) -> AlibiDemo:
    """ALiBi on fixed content: seeded random q, k (``flat``: q = k = 0, every score equal, so all that is
    left is the bias: pure recency). Without ALiBi (and without any other position information) the
    weights know no distance; with it, each head leans towards the recent keys, steeper for larger slopes."""
    rng = np.random.default_rng(seed)
    q, k = (np.zeros((T, dh)), np.zeros((T, dh))) if flat else (rng.standard_normal((T, dh)), rng.standard_normal((T, dh)))
    scores = q @ k.T / math.sqrt(dh)  # [T, T]
    slopes = alibi_slopes(n_heads)
    bias = alibi_bias(slopes, T)
    mask = alibi_bias(np.zeros(1), T)[0]  # [T, T] the causal mask alone (0 / −∞)
    return AlibiDemo(q, k, slopes, scores, bias, softmax(scores + mask), softmax(scores[None] + bias))


def alibi_slopes_table(slopes: np.ndarray) -> pd.DataFrame:
    """Each head's slope as 2^(−e) and as a decimal, with the bias it gives the key 1 and 10 tokens back."""
    e = -np.log2(slopes)
    return pd.DataFrame({"h": np.arange(len(slopes)), "m_h": [f"2^(−{x:g})" for x in np.round(e, 4)],
                         "= ": [f"{m:.6g}" for m in slopes], "−m·1": [f"{-m:.4g}" for m in slopes],
                         "−m·10": [f"{-10 * m:.4g}" for m in slopes]})


def alibi_readout(demo: AlibiDemo, head: int) -> dict[str, str]:
    """The last query's weight on itself and on the first key, without and with head ``head``'s bias."""
    T = demo.scores.shape[0]
    return {"T": str(T), "h": str(head), "m": f"{demo.slopes[head]:.4g}",
            "self_plain": f"{demo.plain[-1, -1]:.3f}", "first_plain": f"{demo.plain[-1, 0]:.3f}",
            "self_alibi": f"{demo.weights[head, -1, -1]:.3f}", "first_alibi": f"{demo.weights[head, -1, 0]:.3g}"}


# ---------------------------------------------------------------------------------------------
# learned absolute positions: a table, one row per position, and nothing past its last row


def learned_toy(max_positions: int, d: int = LEARNED_D, seed: int = 0) -> ToyTransformer:
    """A toy with a learned position table [max_positions, d], freshly initialised from ``seed`` (what a
    trained table holds is learned; what matters here is its shape: one row per position, no more)."""
    cfg = ToyConfig(d_model=d, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=2 * d, position="learned", max_positions=max_positions)
    with torch.random.fork_rng(devices=[]):  # the global generator is left as it was found
        torch.manual_seed(seed)
        return ToyTransformer(cfg).eval()


def gpt2_positions() -> int:
    """GPT-2's learned table length, read from transformers' own GPT2Config (n_positions), not typed here."""
    return int(GPT2Config().n_positions)


def learned_table(model: ToyTransformer) -> np.ndarray:
    """[P, d] the toy's whole position table, one row per position it knows."""
    return model.embed_positions.weight.detach().double().numpy()


def learned_lookup(model: ToyTransformer, start: int, T: int) -> np.ndarray | None:
    """[T, d] the rows the toy adds to positions start … start + T − 1 (its own ``position_add``), or None
    when a position lies past the table: the toy refuses, as GPT-2 does past its 1,024 positions."""
    try:
        with torch.inference_mode():
            rows = model.position_add(start, T)
    except ValueError:
        return None
    return rows.detach().double().numpy()


def learned_read(model: ToyTransformer, start: int, n: int = LEARNED_READ) -> bool | None:
    """Whether the rows the toy adds to positions start … start + n − 1 are exactly those rows of its table
    (a lookup, nothing computed), or None when it refuses a position past the table."""
    rows = learned_lookup(model, start, n)
    return None if rows is None else bool(np.array_equal(rows, learned_table(model)[start : start + n]))


def future_keys(T: int) -> np.ndarray:
    """[T, T] True where a causal query cannot see the key (a later position): the cells the figures grey out."""
    return np.triu(np.ones((T, T), dtype=bool), 1)
