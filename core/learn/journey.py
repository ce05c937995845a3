"""The journey of a sentence: the numbers each stage shows, read off one Trace (pure functions),
and the greedy loop that turns one forward pass into a whole answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

import core.backends as backends
from core.common.i18n import t
from core.common.numbers import top_k
from core.engine.tokens import readable_tokens, visible
from core.engine.trace import Trace
from core.engine.types import LoadedModel

MAX_NEW = 24  # new tokens the journey's loop shows at most


def vector_preview(x: np.ndarray, n: int = 6, lang: str = "en") -> str:
    """'[0.0123, -0.4567, …]  (576 values, ‖x‖ = 1.234)' — the first values of a real vector, its size
    said in ``lang`` (576 个数)."""
    head = ", ".join(f"{v:+.4f}" for v in x[:n])
    size = t("journey.n_values", lang, n=x.shape[-1])
    return f"[{head}, …]  ({size}, ‖x‖ = {float(np.linalg.norm(x)):.3f})"


POSITION_NOTES = {"RoPE": "journey.s4.pos", "learned": "journey.s4.pos_learned", "sinusoidal": "journey.s4.pos_sinusoidal"}


def position_note(position_type: str) -> tuple[str, dict[str, str]]:
    """The i18n key and fields of the sentence on how this model knows positions, from its own fact
    (``ModelFacts.position_type``): RoPE rotates q and k inside attention; learned or sinusoidal
    positions add a vector to the embedding here; no position information at all otherwise."""
    return POSITION_NOTES.get(str(position_type), "journey.s4.pos_none"), {"pos": str(position_type)}


def last_token_norms(tr: Trace) -> np.ndarray:
    """‖resid[l, −1]‖ for l = 0 … L: how the last position's vector grows through the blocks."""
    return np.linalg.norm(tr.resid[:, -1, :].astype(np.float64), axis=-1)


def top_next_tokens(tr: Trace, tokenizer: Any, k: int = 8) -> list[tuple[str, int, float, float]]:
    """(token text, id, logit, probability) of the k best next tokens at the last position."""
    p = tr.last_probs()
    order = top_k(tr.last_logits, k)

    texts = readable_tokens(tokenizer, [int(i) for i in order])
    return [(txt, int(i), float(tr.last_logits[i]), float(p[i])) for txt, i in zip(texts, order)]


def top_frame(rows: Sequence[tuple[str, int, float, float]], token_header: str) -> pd.DataFrame:
    """The next-token table: each candidate made visible by the one label rule (a newline shows as ⏎)."""
    return pd.DataFrame([(visible(txt), i, logit, p) for txt, i, logit, p in rows], columns=[token_header, "ID", "logit", "p"])


def greedy_continuation(loaded: LoadedModel, ids: Sequence[int], max_new: int = MAX_NEW, *,
                        prefill: backends.Step | None = None) -> tuple[list[int], bool]:
    """Greedy decoding with a KV cache: the journey's loop. Returns (new ids, stopped at an end token).

    The prompt goes through the model once (the prefill: every layer caches its keys and values and
    the last position's scores choose the first new token), then each step feeds only the token just
    chosen — the same ``backends.forward_step`` and stop rule (``backends.stop_reason``) as the generation page's Stepper, without its per-step
    records (top-K, attention rows, timings), which the journey does not show. ``prefill``: that first
    pass, if the caller already has it for exactly ``ids`` (its cache is then extended in place)."""
    ids = [int(i) for i in ids]
    if not ids:
        raise ValueError("The prompt has no tokens.")
    step = prefill if prefill is not None else backends.forward_step(loaded, ids)
    new = [int(np.argmax(step.last_logits))]  # greedy: the highest score
    while (why := backends.stop_reason(loaded, new[-1], len(new), len(ids) + len(new), max_new)) is None:
        step = backends.forward_step(loaded, [new[-1]], step.cache)  # one token in; K/V appended to the cache
        new.append(int(np.argmax(step.last_logits)))
    return new, why == "eos"
