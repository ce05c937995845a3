"""Token labels as a plotly figure shows them: ``core.engine.tokens``'s label rule, then
``escape.plot`` (plotly renders a subset of HTML in every label, so a token ``<b>`` typed in a prompt
would turn bold, and ``<br>`` would break the line). Every ``*/figures.py`` takes its token labels
from here, never from ``core.engine.tokens`` directly; text a page hands a builder (its own labels,
words, names) goes through ``escape.plot_all`` where the builder receives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.common import escape
from core.engine import tokens


def position_label(pieces: Sequence[Any], i: int, offset: int = 0) -> str:
    return escape.plot(tokens.position_label(pieces, i, offset))


def position_labels(pieces: Sequence[Any], offset: int = 0) -> list[str]:
    return escape.plot_all(tokens.position_labels(pieces, offset))


def rank_labels(pieces: Sequence[Any]) -> list[str]:
    return escape.plot_all(tokens.rank_labels(pieces))


def visible(piece: Any) -> str:
    return escape.plot(tokens.visible(piece))
