"""The next-token candidates the logits page lists: the top of the last position's distribution as a
table, the candidates the filtering figure draws, and the note under a chosen token.

Pure numpy (and pandas for the table); the sampling steps themselves are ``core.gen.sampling``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from core.common.i18n import t
from core.common.numbers import softmax, top_k

TOP_N = 10  # rows of the candidates table
N_BARS = 30  # candidates the filtering figure draws


def top_ids(scores: np.ndarray, n: int = TOP_N) -> list[int]:
    """The ids of the ``n`` highest scores, highest first."""
    return top_k(scores, n).tolist()


def top_table(last_logits: np.ndarray, ids: Sequence[int], texts: Sequence[str], lang: str) -> pd.DataFrame:
    """Rank, token, id, logit and probability (softmax at T = 1) of ``ids``, in ``lang``."""
    ids = np.asarray(ids, dtype=np.int64)
    probs = softmax(last_logits)
    return pd.DataFrame({
        t("logits.col_rank", lang): range(1, len(ids) + 1),
        t("logits.col_token", lang): list(texts),
        t("logits.col_id", lang): ids,
        t("logits.col_logit", lang): last_logits[ids].round(3),
        t("logits.col_prob", lang): probs[ids].round(4),
    })


def top_table_view(df: pd.DataFrame, lang: str):
    """``top_table`` as a page shows it: every logit to three decimals and every probability to four
    (a bare float column drops trailing zeros: 0.159 above 0.0278)."""
    return df.style.format({t("logits.col_logit", lang): "{:.3f}", t("logits.col_prob", lang): "{:.4f}"})


def pick_note(token_id: int, probs: np.ndarray) -> str:
    """'id 42 · p = 0.1234': a chosen token and its probability after filtering."""
    return f"id {token_id} · p = {probs[token_id]:.4f}"
