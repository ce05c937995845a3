"""The tutorials' comparison tables, as data: the three Transformer families, recurrence against
self-attention, and the Q/K/V metaphor. Every cell is an i18n key (``arch.<table>.<row>.<col>``), so
both languages have the same rows and columns; the page that shows them is ``pages/norms.py``."""

from __future__ import annotations

import pandas as pd

from core.common import i18n

# table → (rows, columns); the cell text is arch.<table>.<row>.<col>, a column header arch.<table>.col.<col>
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "families": (("encoder", "decoder", "encdec"), ("name", "examples", "mask", "use", "limit")),
    "rnn": (("rnn", "attention"), ("name", "per_layer", "sequential", "path", "training")),
    "qkv": (("q", "k", "v"), ("name", "question", "role", "example")),
}


def table(name: str, lang: str) -> pd.DataFrame:
    """One table in ``lang``: a row per entry, a column per aspect."""
    rows, cols = TABLES[name]
    return pd.DataFrame([[i18n.t(f"arch.{name}.{r}.{c}", lang) for c in cols] for r in rows],
                        columns=[i18n.t(f"arch.{name}.col.{c}", lang) for c in cols])
