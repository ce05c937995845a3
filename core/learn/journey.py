"""The journey of a sentence: the numbers each stage shows, read off one Trace (pure functions),
and the greedy loop that turns one forward pass into a whole answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from core.engine.i18n import t
from core.engine.numbers import top_k
from core.engine.tokens import readable_tokens, visible
from core.engine.trace import Trace
from core.engine.types import LoadedModel
from core.gen.generate import Stepper


def vector_preview(x: np.ndarray, n: int = 6, lang: str = "en") -> str:
    """'[0.0123, -0.4567, …]  (576 values, ‖x‖ = 1.234)' — the first values of a real vector, its size
    said in ``lang`` (576 个数)."""
    head = ", ".join(f"{v:+.4f}" for v in x[:n])
    size = t("journey.n_values", lang, n=x.shape[-1])
    return f"[{head}, …]  ({size}, ‖x‖ = {float(np.linalg.norm(x)):.3f})"


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


def greedy_continuation(loaded: LoadedModel, ids: Sequence[int], max_new: int = 24) -> tuple[list[int], bool]:
    """Greedy decoding with a KV cache: the journey's loop. Returns (new ids, stopped at an end token).

    The same prefill/decode stepper as the generation page, without recording attention rows."""
    stepper = Stepper(loaded, ids, max_steps=max_new, record_attention=False)
    stepper.run()
    return list(stepper.generated), stepper.stop_reason == "eos"
