"""The self-check quiz: questions as data, and a pure scoring function.

The questions come from the tutorials' checklists and misconceptions; their words are in
``assets/i18n/learn.json`` (``quiz.<id>.q``, ``.o<i>``, ``.why``), and here each has only its shape: how many
options, which is right, and which page shows the answer. Each attempt's option order (``option_order``)
comes from a seed kept in the URL (``?quiz=``), so a shared link shows everyone the same order.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from core.common import digits


@dataclass(frozen=True)
class Question:
    id: str
    n_options: int
    correct: int  # index of the right option
    page: str  # the app page (stem) that shows why
    concept: str  # core.learn.references concept

    def __post_init__(self) -> None:
        if not 0 <= self.correct < self.n_options:
            raise ValueError(f"question {self.id}: correct option {self.correct} is out of range")


QUESTIONS: tuple[Question, ...] = (
    Question("attn_prob", 3, 1, "heads", "attention"),
    Question("kv_stores", 3, 2, "kv_cache", "kv_cache"),
    Question("temperature", 3, 0, "logits", "sampling"),
    Question("sees_prompt", 3, 1, "masks", "decoder_only"),
    Question("just_attention", 3, 2, "anatomy", "transformer"),
    Question("training_serial", 3, 0, "training", "training"),
    Question("positions", 3, 1, "positions", "positions"),
    Question("more_layers", 3, 2, "anatomy", "model"),
    Question("flash", 3, 0, "attention_lab", "flash_attention"),
    Question("token_id", 3, 1, "tokens", "transformer"),
    Question("rag_embedding", 3, 2, "tokens", "transformer"),
    Question("streaming", 3, 0, "generation", "kv_cache"),
    Question("same_token", 3, 1, "context", "transformer"),
    Question("search_data", 3, 2, "heads", "attention"),
    Question("gqa_share", 3, 0, "multihead", "gqa"),
    Question("head_roles", 3, 2, "heads", "attention"),
    Question("concat_wo", 3, 0, "multihead", "multihead"),
    Question("two_norms", 3, 1, "residual", "transformer"),
    Question("long_io", 3, 2, "kv_cache", "kv_cache"),
    Question("pre_post_norm", 3, 1, "norms", "norms"),
    Question("alibi", 3, 2, "positions", "positions"),
    Question("residual_text", 3, 2, "residual", "transformer"),  # the lessons' "a copy of the text?" (block step)
    Question("zh_cost", 3, 1, "tokens", "transformer"),  # the Chinese lesson's "why more tokens than characters?"
)
BY_ID = {q.id: q for q in QUESTIONS}


@dataclass(frozen=True)
class Score:
    correct: int
    answered: int
    total: int
    verdicts: dict[str, bool | None]  # id → right / wrong / None when unanswered

    @property
    def percent(self) -> float:
        return 100.0 * self.correct / self.total if self.total else 0.0


def score(answers: Mapping[str, int | None], questions: tuple[Question, ...] = QUESTIONS) -> Score:
    """Grade ``answers`` (question id → chosen option index, or None). Unanswered questions count
    as not correct; answers to unknown ids are ignored; an out-of-range index is simply wrong."""
    verdicts: dict[str, bool | None] = {}
    for q in questions:
        a = answers.get(q.id)
        verdicts[q.id] = None if a is None else (int(a) == q.correct)
    right = sum(1 for v in verdicts.values() if v)
    answered = sum(1 for v in verdicts.values() if v is not None)
    return Score(right, answered, len(questions), verdicts)


# ---------------------------------------------------------------------------------------------
# the order of the options, per attempt

SEED_MAX = 1_000_000  # seeds are 0 … SEED_MAX − 1: short enough to read in a link


def new_seed() -> int:
    """A fresh attempt's seed."""
    return secrets.randbelow(SEED_MAX)


def parse_seed(raw: object) -> int | None:
    """A seed from a link: a whole number in 0 … SEED_MAX − 1, or None (anything else is dropped)."""
    return digits.whole_in(raw, 0, SEED_MAX - 1)  # ASCII digits only: "²" is a digit to str.isdigit, not to int()


def option_order(q: Question, seed: int) -> list[int]:
    """The order in which the attempt ``seed`` shows ``q``'s options: a permutation of their
    indices, the same for the same (seed, question) on every machine (random.Random seeded with
    a string hashes it with SHA-512, not with Python's per-process hash)."""
    order = list(range(q.n_options))
    random.Random(f"{int(seed)}:{q.id}").shuffle(order)
    return order
