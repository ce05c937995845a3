"""The serving lab's workloads: the three request shapes of the tutorials (seed 003 §8.4) as JSONL files in
``assets/serving/``. What a workload may hold is checked in one place, ``core.gen.serving._requests``,
whatever it came from (a preset or a file: ``parse_workload``; the page's editor: ``requests_from_rows``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path

from core.common.paths import asset
from core.engine.types import Tokenizer
from core.gen import serving

DIR = asset("serving")
# a chat service whose requests share a long system prompt (reuse the prefix); RAG, long inputs and
# short answers (prefill dominates); short questions with long answers (decode dominates: batch them)
PRESETS = ("chat", "rag", "long_answers")


LANGS = ("en", "zh")  # each preset in English (``name.jsonl``) and Chinese (``name.zh.jsonl``): the same shape of requests


def preset_path(name: str, lang: str = "en") -> Path:
    """The JSONL file of preset ``name`` in ``lang`` (a Chinese page offers the Chinese prompts)."""
    if name not in PRESETS:
        raise KeyError(f"no workload preset {name!r}; they are {', '.join(PRESETS)}")
    if lang not in LANGS:
        raise KeyError(f"no workload language {lang!r}; they are {', '.join(LANGS)}")
    return DIR / (f"{name}.jsonl" if lang == "en" else f"{name}.{lang}.jsonl")


@functools.cache
def preset(name: str, lang: str = "en") -> tuple[serving.Request, ...]:
    """The requests of preset ``name`` in ``lang``, read once (they are immutable)."""
    return serving.parse_workload(preset_path(name, lang).read_text(encoding="utf-8"))


# Where the serving lab runs each of the tutorials' three request shapes (kvcalc.SEED_WORKLOADS' names,
# and the diagnose page's symptoms that stand for them): (part of the page, workload preset).
LAB_PART: dict[str, tuple[str, str]] = {
    "long_in": ("prefix", "chat"),  # long input, short output: reuse a stable prefix
    "long_out": ("batching", "long_answers"),  # short input, long output: batch the decode steps
    "concurrent": ("blocks", "rag"),  # long input, high concurrency: a paged cache, and what happens when it runs out
}
SYMPTOM_SHAPE = {"slow_first": "long_in", "slow_answer": "long_out", "oom": "concurrent"}


def smallest_pool(tokenizer: Tokenizer, reqs: Sequence[serving.Request], page_size: int, max_positions: int | None) -> int:
    """The fewest blocks in which the workload's largest request fits alone (its prompt and every new
    token), plus one: the others must then wait their turn or be preempted, but none is refused."""
    ids = serving.encode_workload(tokenizer, reqs, max_positions)
    return max(math.ceil((len(p) + r.max_new_tokens) / page_size) for p, r in zip(ids, reqs)) + 1
