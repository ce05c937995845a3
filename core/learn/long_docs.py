"""The long-document presets (``assets/long/``): two original texts of about 3,000 SmolLM2 tokens,
each with one fact planted near its start and a last sentence that asks for it, so that the
long-context views have something to find (see ``assets/long/README.md`` for the measured figures)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from core.common.paths import asset
from core.engine.types import Tokenizer

LONG_DIR = asset("long")


@dataclass(frozen=True)
class LongDoc:
    key: str  # "en" | "zh": also the value of the link's ``doc`` parameter
    text: str
    fact: str  # the planted sentence, exactly as it appears once in ``text``


FACTS = {
    "en": "the spare key to the telescope dome is kept inside the green biscuit tin under the kitchen sink.",
    "zh": "钟楼的钥匙一直放在借书台后面那只蓝色的茶壶里。",
}
KEYS = tuple(FACTS)


@cache
def load(key: str) -> LongDoc:
    """The preset ``key``; KeyError for anything else (a link's value is checked with ``KEYS`` first)."""
    if key not in FACTS:
        raise KeyError(key)
    text = (LONG_DIR / f"{key}.txt").read_text(encoding="utf-8")
    if text.count(FACTS[key]) != 1:
        raise ValueError(f"assets/long/{key}.txt must state its planted fact exactly once")
    return LongDoc(key, text, FACTS[key])


def which(prompt: str) -> str | None:
    """The key of the long document ``prompt`` is, or None."""
    for key in KEYS:
        try:
            if load(key).text == prompt:
                return key
        except (OSError, ValueError):
            continue
    return None


def span_of(tokenizer: Tokenizer, text: str, ids: list[int], needle: str) -> tuple[int, int] | None:
    """The token positions [a, b] (inclusive) of ``needle`` inside ``text`` (the exact string that was
    tokenised into ``ids``), from the tokenizer's own character offsets; None when the needle is not
    there, the tokenizer gives no offsets, or its ids differ from ``ids`` (e.g. a cut prompt)."""
    start = text.find(needle)
    if start < 0:
        return None
    end = start + len(needle)
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except (NotImplementedError, TypeError, ValueError):
        return None
    got = list(enc["input_ids"])
    offsets = enc.get("offset_mapping")
    if offsets is None:
        return None
    n = min(len(ids), len(got))
    if got[:n] != list(ids[:n]):
        return None
    inside = [i for i in range(n) if offsets[i][1] > start and offsets[i][0] < end]
    return (inside[0], inside[-1]) if inside else None
