"""Views that only become interesting on long prompts: what the predicting position reads across the
whole document (which heads find a fact planted early), and how much attention the first token
soaks up as the sequence grows (the "attention sink"). Pure numpy on a trace's exact weights. (The loss
along the document is measured by ``core.backends.next_token_logprob``, shared with the training page.)"""

from __future__ import annotations

import math

import numpy as np

KEY_CELLS = 256  # the most key columns the document-wide figure draws


def pooled_keys(rows: np.ndarray, cells: int = KEY_CELLS) -> tuple[np.ndarray, int]:
    """[..., T] → ([..., ceil(T/b)], b): the total weight on each run of b consecutive keys (b = 1 when
    T ≤ ``cells``). Sums, not means, so every drawn cell is a share of the row's attention."""
    T = rows.shape[-1]
    b = max(1, math.ceil(T / cells))
    n = math.ceil(T / b)
    pad = n * b - T
    x = np.pad(np.asarray(rows, dtype=np.float64), [(0, 0)] * (rows.ndim - 1) + [(0, pad)])
    return x.reshape(*rows.shape[:-1], n, b).sum(axis=-1), b


def reader_map(last_attn: np.ndarray, cells: int = KEY_CELLS) -> tuple[np.ndarray, int]:
    """[L, n] the last position's attention per layer (mean over heads), keys pooled by ``pooled_keys``."""
    return pooled_keys(np.asarray(last_attn, dtype=np.float64).mean(axis=1), cells)


def default_span(n_tokens: int, width: int = 10) -> tuple[int, int]:
    """The key span a free prompt starts on: ``width`` keys from position 1. Position 0 is the attention
    sink (most heads park most of their weight there), so a span that includes it would rank the heads by
    the sink, not by what they read."""
    if n_tokens <= 1:
        return 0, 0
    return 1, min(n_tokens - 1, width)


def span_mass(last_attn: np.ndarray, a: int, b: int) -> np.ndarray:
    """[L, H] how much of each head's attention, from the last position, lands on keys a … b."""
    a, b = max(0, int(a)), min(int(b), last_attn.shape[-1] - 1)
    return np.asarray(last_attn[..., a : b + 1], dtype=np.float64).sum(axis=-1)


def uniform_share(a: int, b: int, T: int) -> float:
    """What a head spreading its attention evenly over all T keys would put on a … b."""
    return (min(b, T - 1) - max(a, 0) + 1) / T


def sink_by_query(weights: np.ndarray) -> np.ndarray:
    """[H, T] the weight each query position puts on key 0, per head (one layer's [H, T, T])."""
    return np.asarray(weights[:, :, 0], dtype=np.float64)


def sink_by_layer(last_attn: np.ndarray) -> np.ndarray:
    """[L] the last position's weight on key 0, mean over heads."""
    return np.asarray(last_attn[:, :, 0], dtype=np.float64).mean(axis=1)


def binned(curve: np.ndarray, bins: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): a [T] curve averaged in at most ``bins`` bins (x = each bin's first position)."""
    T = curve.shape[-1]
    b = max(1, math.ceil(T / bins))
    n = math.ceil(T / b)
    x = np.arange(n) * b
    y = np.array([np.mean(curve[..., i * b : (i + 1) * b], axis=-1) for i in range(n)]).T
    return x, y


def loss_table(logp: np.ndarray, bins: int = 8) -> list[tuple[int, int, float]]:
    """(first position, last position, mean loss in nats) over at most ``bins`` equal runs of positions."""
    T = len(logp)
    b = max(1, math.ceil(T / bins))
    return [(i, min(i + b, T) - 1, float(-logp[i : i + b].mean())) for i in range(0, T, b)]
