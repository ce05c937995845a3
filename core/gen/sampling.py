"""How the next token is chosen from a vector of logits: the maths the "Logits & sampling" page teaches.

Pure numpy, no model. The order of the steps is Hugging Face's ``generate()`` order, so the numbers
here are the numbers a real ``model.generate(do_sample=True, ...)`` call would use:

    repetition penalty → ÷ temperature → top-k → top-p → softmax over what survives → draw

The seeds' point, visible in ``filter_steps``: temperature only sharpens or flattens the same
distribution (the ranking of tokens never changes); it adds no knowledge the model did not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.common.numbers import softmax


@dataclass(frozen=True)
class SamplingConfig:
    """One decoding recipe. 0 / 1.0 mean "off" for top_k / top_p / repetition_penalty."""

    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    repetition_penalty: float = 1.0  # 1 = off
    greedy: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.greedy and not (self.temperature > 0):
            raise ValueError(f"temperature must be > 0 (got {self.temperature}); use greedy=True for argmax")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p})")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"top_k must be an integer ≥ 0 (got {self.top_k})")
        if not (self.repetition_penalty > 0):
            raise ValueError(f"repetition_penalty must be > 0 (got {self.repetition_penalty})")


def apply_repetition_penalty(logits: np.ndarray, previous_ids: Sequence[int], penalty: float) -> np.ndarray:
    """HF's RepetitionPenaltyLogitsProcessor: seen tokens become less likely.

    A positive logit is divided by ``penalty`` and a negative one multiplied by it, so with
    penalty > 1 both move *down* (dividing a negative score would raise it). Each seen token is
    penalised once, however often it appeared.
    """
    out = np.array(logits, dtype=np.float64, copy=True)  # [V]
    if penalty == 1.0 or len(previous_ids) == 0:
        return out
    seen = np.unique(np.asarray(previous_ids, dtype=np.int64))
    s = out[seen]
    out[seen] = np.where(s < 0, s * penalty, s / penalty)
    return out


def _top_k_mask(scaled: np.ndarray, k: int) -> np.ndarray:
    """Keep every token whose score ≥ the k-th best score (HF keeps ties at the border too)."""
    v = scaled.shape[0]
    if k <= 0 or k >= v:
        return np.ones(v, dtype=bool)
    kth = np.partition(scaled, v - k)[v - k]  # the k-th largest value
    return scaled >= kth


def _top_p_mask(probs: np.ndarray, keep: np.ndarray, top_p: float) -> np.ndarray:
    """Smallest set of best tokens (among ``keep``) whose cumulative probability reaches top_p.

    ``probs`` are renormalised over ``keep`` first, because in HF top-p runs on the scores that
    top-k left (removed tokens are −inf, i.e. probability 0).
    """
    if top_p >= 1.0:
        return keep.copy()
    p = np.where(keep, probs, 0.0)
    p = p / p.sum()
    order = np.argsort(-p, kind="stable")  # best first
    cum = np.cumsum(p[order])
    # token i (in sorted order) is needed while the mass *before* it is still < top_p
    needed = (cum - p[order]) < top_p
    needed[0] = True  # always at least one token
    out = np.zeros_like(keep)
    out[order[needed]] = True
    return out & keep


def filter_steps(logits: np.ndarray, cfg: SamplingConfig, previous_ids: Sequence[int] = ()) -> dict[str, Any]:
    """Every intermediate of one sampling step, so the page can show each one.

    Returns float64 arrays [V]: ``penalised`` (after the repetition penalty), ``scaled`` (÷ T),
    ``probs_before`` (softmax of scaled, before any filter), ``keep`` (bool mask after top-k then
    top-p) and ``probs`` (renormalised over the kept tokens, 0 elsewhere).
    """
    penalised = apply_repetition_penalty(logits, previous_ids, cfg.repetition_penalty)  # [V]
    temperature = 1.0 if cfg.greedy else cfg.temperature
    scaled = penalised / temperature  # [V] same ranking, different sharpness
    probs_before = softmax(scaled)
    keep = _top_k_mask(scaled, int(cfg.top_k))
    keep = _top_p_mask(probs_before, keep, cfg.top_p)
    masked = np.where(keep, scaled, -np.inf)
    probs = softmax(masked)
    return {
        "penalised": penalised,
        "scaled": scaled,
        "probs_before": probs_before,
        "keep": keep,
        "probs": probs,
    }


def next_token_distribution(logits: np.ndarray, cfg: SamplingConfig, previous_ids: Sequence[int] = ()) -> np.ndarray:
    """The distribution the next token is drawn from ([V], sums to 1). Greedy → one-hot argmax."""
    if cfg.greedy:
        pen = apply_repetition_penalty(logits, previous_ids, cfg.repetition_penalty)
        out = np.zeros(pen.shape[0], dtype=np.float64)
        out[int(np.argmax(pen))] = 1.0
        return out
    return filter_steps(logits, cfg, previous_ids)["probs"]


def choose(
    logits: np.ndarray,
    cfg: SamplingConfig,
    previous_ids: Sequence[int] = (),
    rng: np.random.Generator | None = None,
) -> int:
    """The next token id. Greedy → argmax; otherwise a draw (same seed → same token)."""
    if cfg.greedy:
        pen = apply_repetition_penalty(logits, previous_ids, cfg.repetition_penalty)
        return int(np.argmax(pen))
    probs = filter_steps(logits, cfg, previous_ids)["probs"]
    if rng is None:
        rng = np.random.default_rng(cfg.seed)
    # inverse-CDF draw: one uniform number, so a fixed seed gives a fixed token
    cdf = np.cumsum(probs)
    u = rng.random() * cdf[-1]
    idx = int(np.searchsorted(cdf, u, side="right"))
    idx = min(idx, probs.shape[0] - 1)
    while probs[idx] == 0.0 and idx > 0:  # float edge: never return a removed token
        idx -= 1
    return idx
