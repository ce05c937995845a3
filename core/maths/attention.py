"""Scaled dot-product attention, one step at a time, plus the masks and head bookkeeping the
maths pages teach.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k + M) V

Everything here is a pure numpy function (float64 inside, so a page's numbers are the exact
maths, not a kernel's rounding). The only torch use is the seeds' ``torch.manual_seed(42)``
example and the timing measurement, both imported lazily.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from core.common import i18n, timing
from core.common.numbers import max_abs_diff, softmax
from core.engine.roles import find_sites
from core.engine.tokens import position_label
from core.engine.trace import SiteReader, Trace
from core.engine.types import VALUE_WIDTHS, HeadGeometry, LoadedModel

STEP_NAMES = ("scores", "scaled", "masked", "weights", "output")
SCALE_D_VALUES = tuple(2**i for i in range(11))  # the d_k slider of "why we scale": 1 … 1024
COST_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)  # the n² table's context lengths
BYTE_WIDTHS = (4, 2, 1)  # bytes per cached value the multi-head page offers: float32 first, the lesson's one default (kv.default_note)


# ---------------------------------------------------------------------------------------------
# the five steps


@dataclass(frozen=True)
class AttentionSteps:
    """Every intermediate of one attention computation, named as the tutorials name them."""

    scores: np.ndarray  # [..., Tq, Tk]  Q Kᵀ
    scaled: np.ndarray  # [..., Tq, Tk]  ÷ √d_k (or × the given scale)
    masked: np.ndarray  # [..., Tq, Tk]  + additive mask (0 / −∞)
    weights: np.ndarray  # [..., Tq, Tk]  softmax over keys
    output: np.ndarray  # [..., Tq, dv]  weights × V
    scale: float

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in STEP_NAMES}


def additive_mask(visible: np.ndarray) -> np.ndarray:
    """Boolean visibility (True = may attend) → the additive mask: 0 where visible, −∞ elsewhere."""
    visible = np.asarray(visible, dtype=bool)
    return np.where(visible, 0.0, -np.inf)


def attention_steps(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, scale: float | None = None
) -> AttentionSteps:
    """The five steps of scaled dot-product attention.

    q: [..., Tq, d_k], k: [..., Tk, d_k], v: [..., Tk, d_v] (any leading batch/head dims that
    broadcast). ``mask``: boolean visibility (True = visible) or an additive float mask, broadcastable
    to [..., Tq, Tk]. ``scale`` defaults to 1/√d_k; pass 1.0 to see attention without scaling.
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same last dimension (d_k): {q.shape[-1]} ≠ {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v need the same number of positions: {k.shape[-2]} ≠ {v.shape[-2]}")
    d_k = q.shape[-1]
    s = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
    scores = q @ np.swapaxes(k, -1, -2)  # [..., Tq, Tk]
    scaled = scores * s
    if mask is None:
        add = np.zeros(scores.shape[-2:])
    else:
        mask = np.asarray(mask)
        add = additive_mask(mask) if mask.dtype == bool else mask.astype(np.float64)
    masked = scaled + add  # −∞ stays −∞: softmax turns it into exactly 0
    weights = softmax(masked, axis=-1)
    output = weights @ v  # [..., Tq, d_v]
    return AttentionSteps(scores, scaled, masked, weights, output, s)


def axis_names(prefix: str, n: int, tokens: Any = None) -> list[str]:
    """Row/column names of the calculator's tables: q0, q1 … or, on a real prompt, k3·苹 …"""
    return [f"{prefix}{i}" if tokens is None else f"{prefix}{position_label(tokens, i)}" for i in range(n)]


@dataclass(frozen=True)
class CalculatorLabels:
    """The calculator's axis names: query rows, key rows, and the columns of Q/K and of V."""

    q: list[str]
    k: list[str]
    dk: list[str]
    dv: list[str]


def calculator_labels(ex: dict[str, np.ndarray], tokens: Any = None, pos: int | None = None) -> CalculatorLabels:
    """Names for an example's q [Tq, d_k], k [Tk, d_k], v [Tk, d_v]; on a real prompt (``tokens``)
    the one query row is the token at ``pos`` and keys carry their token text."""
    tq, tk, dk, dv = ex["q"].shape[0], ex["k"].shape[0], ex["q"].shape[1], ex["v"].shape[1]
    q = axis_names("q", tq) if tokens is None else [f"q{position_label(tokens, pos)}"]
    return CalculatorLabels(q, axis_names("k", tk, tokens), axis_names("d", dk), axis_names("d", dv))


def weights_check_table(weights: np.ndarray, rows: list[str], lang: str) -> pd.DataFrame:
    """Per query row: the weights' sum (1 for any row with a visible key) and how many are non-zero."""
    return pd.DataFrame({i18n.t("attention_lab.row_sum", lang): weights.sum(-1),
                         i18n.t("attention_lab.nonzero", lang): (weights > 0).sum(-1)}, index=rows)


# ---------------------------------------------------------------------------------------------
# the seeds' examples


def worked_example(unmask_third: bool = False) -> dict[str, np.ndarray]:
    """The tutorial's hand calculation: query [1, 0]; keys [1, 0], [0, 1]; values [2, 0], [0, 3]
    → weights ≈ [0.67, 0.33], output ≈ [1.34, 0.99]. A third position carries a huge value
    [100, 100]; while the mask hides it, it changes nothing — unmask it and the output jumps."""
    return {
        "q": np.array([[1.0, 0.0]]),  # [Tq=1, d_k=2]
        "k": np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),  # [Tk=3, 2]
        "v": np.array([[2.0, 0.0], [0.0, 3.0], [100.0, 100.0]]),  # [Tk=3, d_v=2]
        "mask": np.array([[True, True, bool(unmask_third)]]),  # [1, 3]
    }


def seed42_example(seq_len: int = 4, head_dim: int = 8) -> dict[str, np.ndarray]:
    """The tutorial's PyTorch example: manual_seed(42); q, k, v = randn(1, 4, 8) in that order;
    causal mask. Returned with its batch dimension, [1, T, dh]."""
    gen = torch.Generator().manual_seed(42)  # same stream as torch.manual_seed(42), without global state
    q = torch.randn(1, seq_len, head_dim, generator=gen)
    k = torch.randn(1, seq_len, head_dim, generator=gen)
    v = torch.randn(1, seq_len, head_dim, generator=gen)
    return {"q": q.numpy(), "k": k.numpy(), "v": v.numpy(), "mask": causal_visibility(seq_len)}


def real_row(tr: Trace, layer: int, head: int, pos: int, site: SiteReader | None = None) -> dict[str, np.ndarray]:
    """One query row of the traced model (read through ``site``, default ``tr.site``): q of (layer, head,
    pos) after RoPE, the keys and values of the KV head that query head reads (h // group), the causal mask
    row, and the model's own weights for comparison."""
    at = site or tr.site
    kv = tr.kv_head_of(head)
    T = tr.n_tokens
    return {
        "q": at("q", layer)[head, pos : pos + 1].astype(np.float64),  # [1, dh]
        "k": at("k", layer)[kv].astype(np.float64),  # [T, dh]
        "v": at("v", layer)[kv].astype(np.float64),  # [T, dh]
        "mask": (np.arange(T) <= pos)[None, :],  # [1, T] causal: keys 0…pos
        "reference": at("attn_pattern", layer)[head, pos].astype(np.float64),  # [T]
        "kv_head": np.array(kv),
    }


def drop_batch(ex: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """An example without its batch dimension of 1 ([1, T, dh] → [T, dh]); 2-D arrays stay."""
    return {k: v[0] if v.ndim == 3 else v for k, v in ex.items()}


# ---------------------------------------------------------------------------------------------
# why divide by √d_k


def scale_experiment(d_values: Iterable[int], n_keys: int = 16, n_trials: int = 400, seed: int = 0) -> dict[str, np.ndarray]:
    """Random q, k with unit-variance components: q·k has std √d_k, so unscaled softmax
    saturates (one weight → 1) as d_k grows, while q·k/√d_k keeps std 1.

    Returns arrays over ``d_values``: measured dot std, mean max weight and mean entropy (nats)
    of a softmax over ``n_keys`` keys, unscaled and scaled, averaged over ``n_trials`` draws.
    """
    rng = np.random.default_rng(seed)
    ds = np.asarray(list(d_values), dtype=int)
    out = {k: np.zeros(len(ds)) for k in ("dot_std", "max_unscaled", "max_scaled", "ent_unscaled", "ent_scaled")}
    for i, d in enumerate(ds):
        q = rng.standard_normal((n_trials, 1, d))  # [N, 1, d]
        k = rng.standard_normal((n_trials, n_keys, d))  # [N, n, d]
        dots = (q @ np.swapaxes(k, -1, -2))[:, 0, :]  # [N, n]
        out["dot_std"][i] = dots.std()
        for tag, z in (("unscaled", dots), ("scaled", dots / math.sqrt(d))):
            w = softmax(z, axis=-1)
            out[f"max_{tag}"][i] = w.max(axis=-1).mean()
            out[f"ent_{tag}"][i] = (-(w * np.log(np.clip(w, 1e-300, None))).sum(axis=-1)).mean()
    out["d"] = ds.astype(float)
    return out


def scale_readout(res: dict[str, np.ndarray], d: int) -> dict[str, str]:
    """The numbers the page shows for one d_k of ``scale_experiment``'s result: measured q·k std
    beside √d_k, and the mean largest weight unscaled and scaled."""
    i = int(np.flatnonzero(res["d"] == d)[0])
    return {"std": f"{res['dot_std'][i]:.2f}", "sqrt": f"√d_k = {np.sqrt(d):.2f}",
            "unscaled": f"{res['max_unscaled'][i]:.3f}", "scaled": f"{res['max_scaled'][i]:.3f}"}


# ---------------------------------------------------------------------------------------------
# the mask gallery (True = the query row may read the key column)


def causal_visibility(T: int) -> np.ndarray:
    """[T, T] lower triangle: position i sees 0…i."""
    return np.tril(np.ones((T, T), dtype=bool))


def padding_visibility(lengths: Iterable[int], T: int | None = None) -> np.ndarray:
    """[B, T, T] for a right-padded batch: every query may read key j only if j is a real token
    (j < length). Rows of PAD queries are kept (their outputs are simply ignored later)."""
    lengths = [int(n) for n in lengths]
    T = max(lengths) if T is None else T
    real = np.arange(T)[None, :] < np.asarray(lengths)[:, None]  # [B, T] key is not PAD
    return np.broadcast_to(real[:, None, :], (len(lengths), T, T)).copy()


def causal_padding_visibility(lengths: Iterable[int], T: int | None = None) -> np.ndarray:
    """[B, T, T]: causal AND not PAD — what a decoder batch really uses."""
    pad = padding_visibility(lengths, T)
    return pad & causal_visibility(pad.shape[-1])[None]


def bidirectional_visibility(T: int) -> np.ndarray:
    """[T, T] all visible: an encoder (BERT-like) reads both sides."""
    return np.ones((T, T), dtype=bool)


def cross_visibility(T_dec: int, T_enc: int) -> np.ndarray:
    """[T_dec, T_enc] rectangular: every decoder query may read every encoder output."""
    return np.ones((T_dec, T_enc), dtype=bool)


def sliding_window_visibility(T: int, window: int) -> np.ndarray:
    """[T, T] causal and local: i sees j when 0 ≤ i − j < window (itself and window−1 before)."""
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return (j <= i) & (i - j < window)


def pattern_support(pattern: np.ndarray, tol: float = 0.0) -> np.ndarray:
    """Where a real attention pattern is non-zero: the mask the model actually applied."""
    return np.asarray(pattern, dtype=np.float64) > tol


# ---------------------------------------------------------------------------------------------
# multi-head, GQA, MQA


# Facts: SmolLM2 from its config; the 4096/32 split and the 28 q / 4 KV grouping from the
# tutorials (configs: Llama-2-7B has 32 layers; Qwen2.5-7B 3584 wide, 28 layers, head_dim 128);
# Qwen2.5-0.5B from the tutorial's config print (24 layers, head_dim 64).
HEAD_CONFIGS = (
    HeadGeometry("SmolLM2-135M", n_layers=30, n_heads=9, n_kv_heads=3, d_model=576),
    HeadGeometry("Qwen2.5-0.5B", n_layers=24, n_heads=14, n_kv_heads=2, d_model=896),
    HeadGeometry("Llama-2-7B (32 q / 32 KV)", n_layers=32, n_heads=32, n_kv_heads=32, d_model=4096),
    HeadGeometry("Qwen2.5-7B (28 q / 4 KV)", n_layers=28, n_heads=28, n_kv_heads=4, d_model=3584),
)


def head_configs(own: HeadGeometry | None = None) -> list[HeadGeometry]:
    """The loaded model's geometry first (when there is one), then the tutorials' models, less
    the one that names the same model."""
    mine = [own] if own is not None else []
    return mine + [c for c in HEAD_CONFIGS if own is None or c.name.split()[0] not in own.name]


def bytes_label(bytes_per_value: int) -> str:
    """'2 B · fp16 / bf16': a width and the dtypes that store a value in it."""
    names = {b: name for name, b in VALUE_WIDTHS.items()}
    return f"{bytes_per_value} B · {names[bytes_per_value]}"


def kv_group_map(n_heads: int, n_kv_heads: int) -> np.ndarray:
    """[H] the KV head each query head reads: h // (H / Hkv)."""
    if n_heads % n_kv_heads:
        raise ValueError("query heads must be a multiple of KV heads")
    return np.arange(n_heads) // (n_heads // n_kv_heads)


def kv_sharing_matrix(n_heads: int, n_kv_heads: int) -> np.ndarray:
    """[Hkv, H] boolean: KV head g is read by query head h."""
    g = kv_group_map(n_heads, n_kv_heads)
    return np.arange(n_kv_heads)[:, None] == g[None, :]


def multihead_shapes(cfg: HeadGeometry, T: int) -> list[tuple[str, str]]:
    """(stage, shape) rows of one multi-head attention sub-layer, for T tokens."""
    H, Hkv, dh, d = cfg.n_heads, cfg.n_kv_heads, cfg.dh, cfg.d_model
    return [
        ("X", f"[{T}, {d}]"),
        ("Q = X·W_Q", f"[{T}, {H * dh}] → [{H}, {T}, {dh}]"),
        ("K = X·W_K, V = X·W_V", f"[{T}, {Hkv * dh}] → [{Hkv}, {T}, {dh}]"),
        ("QKᵀ/√d_k (+mask)", f"[{H}, {T}, {T}]"),
        ("softmax · V", f"[{H}, {T}, {dh}]"),
        ("concat", f"[{T}, {H} × {dh} = {H * dh}]"),
        ("· W_O", f"[{H * dh}, {d}] → [{T}, {d}]"),
    ]


def multihead_shapes_table(cfg: HeadGeometry, T: int, lang: str) -> pd.DataFrame:
    """``multihead_shapes`` as a table, column names in ``lang``."""
    return pd.DataFrame(multihead_shapes(cfg, T), columns=[i18n.t("multihead.stage", lang), i18n.t("ui.shape", lang)])


def recombine_heads(weights: np.ndarray, v: np.ndarray, o_weight: np.ndarray) -> dict[str, np.ndarray]:
    """Per-head outputs → concat → W_O, from a trace's own arrays.

    weights: [H, T, T] attention pattern, v: [Hkv, T, dh], o_weight: [d, H·dh] (nn.Linear layout,
    y = x Wᵀ). Returns per_head [H, T, dh], concat [T, H·dh] and out [T, d].
    """
    H, Hkv = weights.shape[0], v.shape[0]
    v_per_q = v[kv_group_map(H, Hkv)].astype(np.float64)  # [H, T, dh]: each query head reads its group's V
    # one head and one band of query rows at a time, in float64, without converting the whole [H, T, T] to
    # float64 at once (744 MB at 3,214 tokens, 3 s of the page); a band's columns past its last row are left
    # out where they are all exactly 0 (a causal pattern: about half of each product at a long prompt)
    per_head = np.stack([_weights_times_v(weights[h], v_per_q[h]) for h in range(H)])  # [H, T, dh]
    concat = np.transpose(per_head, (1, 0, 2)).reshape(per_head.shape[1], -1)  # [T, H·dh], head-major
    out = concat @ o_weight.astype(np.float64).T  # [T, d]
    return {"per_head": per_head, "concat": concat, "out": out}


RECOMBINE_BAND = 512  # query rows per product in recombine_heads


def _weights_times_v(w: np.ndarray, v: np.ndarray, band: int = RECOMBINE_BAND) -> np.ndarray:
    """[T, T] weights @ [T, dh] float64 values, in bands of query rows; a band's columns at and past its end
    enter only where one of them is non-zero. A column left out has weight exactly 0 in every row of the band,
    so every output is the same sum of the same non-zero products (its rounding may differ in the last bits
    from the full product's, both within float64's γ_T of the exact value)."""
    T = w.shape[0]
    out = np.empty((T, v.shape[1]), dtype=np.float64)
    for a in range(0, T, band):
        b = min(T, a + band)
        end = b if not np.any(w[a:b, b:]) else w.shape[1]
        out[a:b] = np.asarray(w[a:b, :end], dtype=np.float64) @ v[:end]
    return out


def head_write_norms(per_head: np.ndarray) -> np.ndarray:
    """[H, T] the length of each head's output at each position: how much it writes there."""
    return (per_head**2).sum(-1) ** 0.5


def head_labels(n_heads: int) -> list[str]:
    return [f"h{h}" for h in range(n_heads)]


def recombine_readout(parts: dict[str, np.ndarray]) -> dict[str, str]:
    """The page's three numbers for ``recombine_heads``' parts: two shapes and the gap to attn_out."""
    return {"per_head": str(list(parts["per_head"].shape)), "concat": str(list(parts["concat"].shape)),
            "diff": f"{float(parts['max_diff']):.2e}"}


# ---------------------------------------------------------------------------------------------
# cost


def score_elements(n: int) -> int:
    """Entries of one head's n × n score matrix: the O(n²) of full attention."""
    return int(n) * int(n)


TIMING_REPS = 7  # timed runs per length: the curve shows their median, the error bars their interquartile range


def time_attention(lengths: Iterable[int], n_heads: int = 9, head_dim: int = 64, reps: int = TIMING_REPS, seed: int = 0,
                   clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Measured wall time of causal attention on this machine with torch's scaled_dot_product_attention,
    random q, k, v of shape [1, H, n, dh]: one untimed warm-up per length, then ``reps`` rounds that
    each time every length once. Interleaved, so that a busy spell slows every length alike instead of
    bending the curve at one of them. Returns per length (ms) the median, q1, q3, min and max, the
    ``Timing`` of each, and ``busy`` when any length's runs disagree too much (``Timing.busy``), ``n_busy`` how many."""
    if reps < 1:
        raise ValueError("reps must be ≥ 1")
    gen = torch.Generator().manual_seed(seed)
    lens = np.asarray(list(lengths), dtype=int)
    qkv = [tuple(torch.randn(1, n_heads, int(n), head_dim, generator=gen) for _ in range(3)) for n in lens]
    samples: list[list[float]] = [[] for _ in lens]
    with torch.inference_mode():
        for q, k, v in qkv:
            F.scaled_dot_product_attention(q, k, v, is_causal=True)  # warm-up
        for _ in range(reps):
            for i, (q, k, v) in enumerate(qkv):
                t0 = clock()
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
                samples[i].append(clock() - t0)
    timings = [timing.of(s, warmup=1) for s in samples]

    def col(attr: str) -> np.ndarray:
        return np.array([getattr(t, attr) * 1000.0 for t in timings])

    return {"n": lens.astype(float), "ms": col("median"), "q1": col("q1"), "q3": col("q3"), "min": col("lo"),
            "max": col("hi"), "elements": lens.astype(float) ** 2, "reps": reps, "timings": timings,
            "busy": any(t.busy for t in timings), "n_busy": sum(t.busy for t in timings)}


def cost_table(lengths: Iterable[int], elements_label: str = "n²", ratio_label: str = "×"):
    """DataFrame: context length n, score entries n², and the growth factor from the row above
    (×4 whenever n doubles)."""
    ns = [int(n) for n in lengths]
    el = [score_elements(n) for n in ns]
    ratio = [np.nan] + [b / a for a, b in itertools.pairwise(el)]
    return pd.DataFrame({"n": ns, elements_label: el, ratio_label: ratio})


def cost_table_view(df: pd.DataFrame):
    """``cost_table`` as a page shows it: whole numbers with thousands separators, the growth as
    "×4", and "—" where there is no row above (never "None" or "nan")."""
    n_col, el_col, ratio_col = df.columns
    return df.style.format({n_col: "{:,}", el_col: "{:,}", ratio_col: "×{:g}"}, na_rep="—")


@dataclass(frozen=True)
class MaskPanel:
    """One matrix of the gallery, with its axis labels (the page translates ``key``)."""

    key: str  # i18n suffix: which mask this is
    visible: np.ndarray  # [Tq, Tk] bool
    rows: list[str]
    cols: list[str]


SEED_WORDS = {"zh": ("我", "喜欢", "人工", "智能"), "en": ("I", "like", "artificial", "intelligence")}


def mask_gallery(T: int = 4, lengths: tuple[int, int] = (4, 2), window: int = 2, T_enc: int = 5,
                 lang: str = "en") -> dict[str, list[MaskPanel]]:
    """Every mask of the gallery, grouped by tab: causal, padding (sentence A and B of a
    right-padded batch), causal + padding, bidirectional, cross-attention, sliding window."""
    # The seeds' four-token example (我 喜欢 人工 智能: I like artificial intelligence) labels the
    # square masks when it fits, in the page's language.
    seed_words = SEED_WORDS.get(lang, SEED_WORDS["en"])
    num = [f"{i}·{seed_words[i]}" if len(seed_words) >= T else str(i) for i in range(T)]
    Tb = max(lengths)
    pad = [[f"{i}·{'PAD' if i >= n else 'tok'}" for i in range(Tb)] for n in lengths]
    p, cp = padding_visibility(lengths, Tb), causal_padding_visibility(lengths, Tb)
    return {
        "causal": [MaskPanel("causal", causal_visibility(T), num, num)],
        "padding": [MaskPanel(f"padding_{s}", p[b], pad[b], pad[b]) for b, s in enumerate("ab")],
        "causal_padding": [MaskPanel(f"causal_padding_{s}", cp[b], pad[b], pad[b]) for b, s in enumerate("ab")],
        "bidirectional": [MaskPanel("bidirectional", bidirectional_visibility(T), num, num)],
        "cross": [MaskPanel("cross", cross_visibility(T, T_enc), [f"dec{i}" for i in range(T)], [f"enc{j}" for j in range(T_enc)])],
        "sliding": [MaskPanel("sliding", sliding_window_visibility(T, window), num, num)],
    }


def support_summary(pattern: np.ndarray) -> dict[str, int]:
    """How a real [T, T] pattern's non-zeros sit against the causal triangle: entries above the
    diagonal that are non-zero (must be 0), and non-zeros on/below it (float16 may round a tiny
    weight down to 0, so this can fall short of the triangle's size)."""
    nz = pattern_support(pattern)
    T = nz.shape[-1]
    tri = causal_visibility(T)
    return {"above_nonzero": int((nz & ~tri).sum()), "above_total": int((~tri).sum()),
            "below_nonzero": int((nz & tri).sum()), "below_total": int(tri.sum())}


def support_readout(pattern: np.ndarray) -> dict[str, str]:
    """``support_summary`` as the page says it: 'non-zero / entries' above and on/below the diagonal."""
    s = support_summary(pattern)
    return {"above": f"{s['above_nonzero']} / {s['above_total']}", "below": f"{s['below_nonzero']} / {s['below_total']}"}


def divisors(n: int) -> list[int]:
    """The KV-head counts a model with n query heads could use: 1 (MQA) … n (MHA)."""
    return [d for d in range(1, n + 1) if n % d == 0]


def kv_table(configs: Iterable[HeadGeometry], n_tokens: int, bytes_per_value: int = 2, lang: str = "en"):
    """DataFrame: per model, the KV-cache bytes per token (2 × layers × Hkv × head_dim × bytes)
    and for ``n_tokens`` tokens, next to what full MHA would need. Column names in ``lang``."""
    rows = []
    for c in configs:
        per = c.kv_bytes_per_token(bytes_per_value)
        mha = c.with_kv_heads(c.n_heads).kv_bytes_per_token(bytes_per_value)
        rows.append([c.name, c.kind, c.n_layers, c.n_heads, c.n_kv_heads, c.dh, per,
                     per * n_tokens / 2**20, mha * n_tokens / 2**20])
    cols = [i18n.t(f"multihead.col_{k}", lang, n=f"{n_tokens:,}")
            for k in ("model", "kind", "layers", "h", "hkv", "dh", "per_token", "mib", "mib_mha")]
    return pd.DataFrame(rows, columns=cols)


def kv_table_view(df: pd.DataFrame):
    """``kv_table`` as a page shows it: bytes per token with thousands separators, MiB to one decimal."""
    cols = list(df.columns)
    return df.style.format({cols[6]: "{:,}", cols[7]: "{:,.1f}", cols[8]: "{:,.1f}"})


def recombine_layer(loaded: LoadedModel, tr: Trace, layer: int, site: SiteReader | None = None) -> dict[str, np.ndarray]:
    """``recombine_heads`` with the model's own W_O (and bias, where it has one) for layer ``layer``, and the
    gap to the traced attn_out (read through ``site``, default ``tr.site``). Raises ValueError for an attention
    without ``o_proj``."""
    at = site or tr.site
    attn = find_sites(loaded.model).attns[layer]
    o = getattr(attn, "o_proj", None)
    if o is None:
        raise ValueError(f"{type(attn).__name__} has no o_proj")
    parts = recombine_heads(at("attn_pattern", layer), at("v", layer), o.weight.detach().float().numpy())
    if getattr(o, "bias", None) is not None:  # Llama/SmolLM2 have none; some models do
        parts["out"] = parts["out"] + o.bias.detach().float().numpy()
    parts["max_diff"] = np.array(max_abs_diff(parts["out"], at("attn_out", layer)))
    return parts


# ---------------------------------------------------------------------------------------------
# three implementations, one answer (seed 000's misconception 10: "FlashAttention changes the model's meaning")


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention written out: scores [H, T, T], the mask, softmax, times V. The whole matrix in memory."""
    T = q.shape[-2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [H, T, T]
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v  # [H, T, dh]


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int = 64) -> torch.Tensor:
    """FlashAttention's idea, plainly: the keys in blocks of ``block``, an online softmax per query (a running
    maximum m, a running sum l of exp(score − m) and a running output o, each rescaled by exp(m_old − m_new)
    when a block raises the maximum). No T × T matrix exists at any time, only [H, T, block]; the result is
    the same softmax(q·kᵀ/√dh)·V up to the order of the sums (float rounding)."""
    H, T, dh = q.shape
    scale = 1.0 / math.sqrt(dh)
    m = torch.full((H, T), float("-inf"), dtype=q.dtype)
    l = torch.zeros((H, T), dtype=q.dtype)
    o = torch.zeros((H, T, dh), dtype=q.dtype)
    rows = torch.arange(T)[:, None]
    for s0 in range(0, T, block):
        kb, vb = k[:, s0 : s0 + block], v[:, s0 : s0 + block]  # [H, b, dh]
        s = q @ kb.transpose(-1, -2) * scale  # [H, T, b]
        s = s.masked_fill(torch.arange(s0, s0 + kb.shape[1])[None, :] > rows, float("-inf"))  # causal, per block
        m_new = torch.maximum(m, s.max(dim=-1).values)  # key 0 is in the first block: finite from then on
        p = torch.exp(s - m_new[..., None])  # a masked score gives exp(−∞) = 0
        fix = torch.exp(m - m_new)  # the old sums were taken against the old maximum
        l = l * fix + p.sum(dim=-1)
        o = o * fix[..., None] + p @ vb
        m = m_new
    return o / l[..., None]


IMPLEMENTATIONS = ("sdpa", "eager", "tiled")


def compare_implementations(n: int = 512, n_heads: int = 4, head_dim: int = 64, block: int = 64, seed: int = 0) -> dict[str, Any]:
    """The same random causal attention in float32 three ways — torch's SDPA, eager (the matrix written out)
    and ``tiled_attention`` — each measured against the exact answer (the same inputs in float64, eager).
    Returns per implementation the largest |output − exact|, and ``float32_error``: eager float32's own
    distance from the exact answer, the yardstick (float32 can do no better than that on these inputs)."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n_heads, n, head_dim, generator=gen) for _ in range(3))
    with torch.inference_mode():
        exact = eager_attention(q.double(), k.double(), v.double())
        outs = {"sdpa": F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0],
                "eager": eager_attention(q, k, v), "tiled": tiled_attention(q, k, v, block)}
    err = {name: float((outs[name].double() - exact).abs().max()) for name in IMPLEMENTATIONS}
    return {"n": n, "heads": n_heads, "head_dim": head_dim, "block": block, "max_err": err, "float32_error": err["eager"],
            "largest": float(exact.abs().max()), "outputs": {k_: o.numpy() for k_, o in outs.items()}, "exact": exact.numpy()}


# ---------------------------------------------------------------------------------------------
# The quiet reference shipped with the app (tests/benchmarks/bench_attention_reference.py --write), shown
# beside the live measurement, so that a class sees a calm number even on a busy server.

REFERENCE_FILE = "attention_timing.json"  # in assets/
REFERENCE_LENGTHS = (256, 512, 1024, 2048, 4096, 8192)  # the cost tab's lengths (core.web.cache.TIMING_LENGTHS)


def reference_record(t: dict[str, Any], machine: str, when: str, torch_version: str) -> dict[str, Any]:
    """A ``time_attention`` result as the JSON the app ships: what was timed, where, when, with which torch."""
    return {"machine": machine, "date": when, "torch": torch_version, "reps": int(t["reps"]), "busy": bool(t["busy"]),
            "n_busy": int(t["n_busy"]), "n": [int(x) for x in t["n"]],
            **{k: [round(float(x), 4) for x in t[k]] for k in ("ms", "q1", "q3", "min", "max")}}


def load_reference(path: Any) -> dict[str, Any]:
    """The shipped reference timing, its lengths and columns checked to line up."""
    with open(path, encoding="utf-8") as f:
        ref = json.load(f)
    n = len(ref["n"])
    if not all(len(ref[k]) == n for k in ("ms", "q1", "q3", "min", "max")) or not all(ref.get(k) for k in ("machine", "date", "torch")):
        raise ValueError(f"{path}: not a reference timing (lengths and ms, q1, q3, min, max must line up; machine, date, torch set)")
    return ref


def reference_frame(ref: dict[str, Any], live: dict[str, Any] | None, labels: dict[str, str]) -> pd.DataFrame:
    """n, the reference's median and interquartile range (ms), and the live median where it timed the same n."""
    live_ms = dict(zip((int(x) for x in live["n"]), live["ms"])) if live else {}
    return pd.DataFrame({"n": ref["n"], labels["ref"]: ref["ms"],
                         labels["iqr"]: [f"{a:,.2f} – {b:,.2f}" for a, b in zip(ref["q1"], ref["q3"])],
                         labels["live"]: [float(live_ms.get(n, np.nan)) for n in ref["n"]]})


# ---------------------------------------------------------------------------------------------
# the calculator's glue (pages/attention_lab.py keeps only the widgets)

CalculatorExample = tuple[dict[str, np.ndarray], CalculatorLabels, str, str]


def preset_example(preset: str, unmask: bool = False) -> CalculatorExample:
    """(arrays, axis labels, editor version, mask editor version) of a built-in example: ``"worked"`` (the
    tutorial's, its third key hidden unless ``unmask``) or ``"seed42"``. The versions key the page's editors:
    a new example starts fresh ones, while unmasking the worked example renews only the mask's editor."""
    if preset == "worked":
        ex = worked_example(unmask)
        return ex, calculator_labels(ex), "worked", f"worked{unmask}"
    if preset == "seed42":
        ex = drop_batch(seed42_example())
        return ex, calculator_labels(ex), preset, preset
    raise ValueError(f"no built-in example {preset!r}")


def key_window_start(n_keys: int, pos: int, cells: int) -> tuple[int, int] | None:
    """(last possible first key, default first key) of a window of ``cells`` keys over ``n_keys``, the default
    the window that ends at the query ``pos``; None when every key fits (no window)."""
    if cells >= n_keys:
        return None
    hi = n_keys - cells
    return hi, max(0, min(hi, pos - cells + 1))


def put_rows(whole: np.ndarray, rows: slice, edited: np.ndarray) -> np.ndarray:
    """A copy of ``whole`` with its ``rows`` replaced by ``edited`` (keys outside a window keep the model's values)."""
    out = whole.copy()
    out[rows] = edited
    return out


def hidden_mass(weights: np.ndarray, keys: slice) -> float:
    """The first query row's attention on the keys outside the window ``keys`` (the softmax ran over all of them)."""
    return float(weights[0].sum() - weights[0, keys].sum())


def implementation_rows(c: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(implementation, its max error, that error over float32's own) per ``IMPLEMENTATIONS``, as the table shows them."""
    return [(k, f"{c['max_err'][k]:.2e}", f"{c['max_err'][k] / c['float32_error']:.2f}×") for k in IMPLEMENTATIONS]
