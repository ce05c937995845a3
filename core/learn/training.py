"""Training vs inference, on the real model: teacher forcing and the one-position-at-a-time loop.

In training the labels are the ids shifted by one (inputs A B C D, labels B C D E) and ONE forward pass
gives every position's logits (the causal mask makes row t what the model says after 0 … t alone); the
loss is the mean of −log p(label_t | prefix ≤ t). At inference each token needs its own step
(``prefix_logits``: the same numbers up to the rounding of two routes). Pure: numpy and ``core.backends``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import core.backends as backends
from core.common.numbers import softmax, top_k
from core.engine.trace import Trace
from core.engine.types import LoadedModel

MAX_POSITIONS = 256  # positions scored in one page view (each a bar of the loss figure)
TOP = 8  # candidates compared between the parallel row and the separate prefix pass


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per row, −log softmax(logits)[label] in float64 (log-sum-exp with the row's maximum taken out):
    [n, V] logits, [n] labels → [n] losses in nats."""
    z = np.asarray(logits, dtype=np.float64)
    lab = np.asarray(labels, dtype=np.int64)
    if z.ndim != 2 or lab.shape != (z.shape[0],):
        raise ValueError(f"logits [n, V] and labels [n] expected, got {z.shape} and {lab.shape}")
    m = z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    return lse - z[np.arange(z.shape[0]), lab]


@dataclass(frozen=True)
class TeacherForcing:
    """Every position's next-token loss from one parallel forward pass."""

    ids: np.ndarray  # [n + 1] the ids scored (the prompt's first n + 1 tokens)
    tokens: list[str]  # [n + 1] their readable pieces
    losses: np.ndarray  # [n] float64: −log p(ids[t + 1] | ids[0 … t]), t = 0 … n − 1, in nats
    p_label: np.ndarray  # [n] float64: p(ids[t + 1] | ids[0 … t])
    top1: np.ndarray  # [n] int64: the model's own favourite next token at t
    rank: np.ndarray  # [n] int64: the label's rank among all tokens at t (0 = the favourite)
    n_total: int  # tokens in the whole prompt (more than ``ids`` when it was longer than MAX_POSITIONS)

    @property
    def n(self) -> int:
        return int(self.losses.shape[0])

    @property
    def mean_loss(self) -> float:
        """The training loss of this text: the mean over positions (what HF's ``labels=`` loss returns)."""
        return float(self.losses.mean())

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.mean_loss))

    @property
    def n_top1(self) -> int:
        """Positions where the model's favourite is the real next token."""
        return int((self.rank == 0).sum())

    @property
    def cut(self) -> bool:
        return self.n_total > self.ids.shape[0]


def scored_trace(loaded: LoadedModel, tr: Trace, max_positions: int = MAX_POSITIONS) -> Trace:
    """``tr`` itself when it has at most ``max_positions`` tokens, else a trace of its first ``max_positions``
    tokens (one more forward pass: by the causal mask, the same rows as the first rows of ``tr``)."""
    if tr.n_tokens <= max_positions:
        return tr
    return backends.trace_ids(loaded, tr.token_ids[:max_positions].tolist(), prompt=tr.prompt, text=tr.text, chat=tr.chat)


def teacher_forcing(loaded: LoadedModel, tr: Trace, n_total: int | None = None) -> TeacherForcing:
    """Per-position losses of ``tr``'s text from its one forward pass: the LM head on every row of
    ``final_hidden`` (``backends.next_token_logprob``, a chunk of rows at a time), with each label's rank
    and the favourite read off the same rows."""
    ids = tr.token_ids.astype(np.int64)
    if ids.size < 2:
        raise ValueError("next-token labels need at least two tokens")
    scored = backends.next_token_logprob(loaded, tr, ranks=True)
    losses = -scored.logp
    return TeacherForcing(ids=ids, tokens=[str(t) for t in tr.tokens], losses=losses, p_label=np.exp(-losses),
                          top1=scored.top1, rank=scored.rank, n_total=int(n_total if n_total is not None else ids.size))


def parallel_row(loaded: LoadedModel, tr: Trace, t: int) -> np.ndarray:
    """Row ``t`` of the parallel pass's logits, [V] float32."""
    if not 0 <= t < tr.n_tokens:
        raise IndexError(f"position {t} is outside 0 … {tr.n_tokens - 1}")
    return tr.last_logits if t == tr.n_tokens - 1 else backends.logits_row(loaded, tr, t)


def prefix_logits(loaded: LoadedModel, ids: Sequence[int], t: int) -> np.ndarray:
    """Inference's view of position ``t``: a separate forward pass of ids[0 … t] only (no cache), its last
    row of logits, [V] float32 — what generation computes when the text so far ends at t."""
    ids = [int(i) for i in ids]
    if not 0 <= t < len(ids):
        raise IndexError(f"position {t} is outside 0 … {len(ids) - 1}")
    return backends.forward_step(loaded, ids[: t + 1], use_cache=False).last_logits


@dataclass(frozen=True)
class SameLogits:
    """Row t of the parallel pass beside a separate pass of the prefix 0 … t."""

    t: int
    parallel: np.ndarray  # [V] float32
    prefix: np.ndarray  # [V] float32
    top_ids: np.ndarray  # [TOP] the parallel row's best ids, best first

    @property
    def max_diff(self) -> float:
        return float(np.abs(self.parallel.astype(np.float64) - self.prefix.astype(np.float64)).max())

    @property
    def scale(self) -> float:
        """The largest |logit|: the difference relative to it is float32 rounding (~10⁻⁶), not another answer."""
        return float(np.abs(self.parallel.astype(np.float64)).max())

    @property
    def same_top(self) -> bool:
        """Whether both passes rank the same best candidates in the same order."""
        return bool(np.array_equal(self.top_ids, top_k(self.prefix, self.top_ids.size)))

    def probs(self) -> tuple[np.ndarray, np.ndarray]:
        """(parallel, prefix) probabilities of the ``top_ids`` candidates."""
        return softmax(self.parallel)[self.top_ids], softmax(self.prefix)[self.top_ids]

    def top_logits(self) -> tuple[np.ndarray, np.ndarray]:
        """(parallel, prefix) logits of the ``top_ids`` candidates (readable bars even where one takes 99 %)."""
        return self.parallel[self.top_ids], self.prefix[self.top_ids]


def same_logits(loaded: LoadedModel, tr: Trace, t: int, k: int = TOP) -> SameLogits:
    """Row ``t`` of ``tr``'s one parallel pass and a separate forward pass of its prefix 0 … t."""
    par = parallel_row(loaded, tr, t)
    return SameLogits(t, par, prefix_logits(loaded, tr.token_ids.tolist(), t), top_k(par, k))

