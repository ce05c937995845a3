"""Prepared views of the tutorials' examples: a prompt, the query to look from and the words it should
find, with the layer and head read off the model's own attention (never typed by hand).

Seed 000's pronoun example: in 小明把书交给小红，因为她明天要考试。 the representation of 她 should draw on
小红. SmolLM2 cuts 她 into two byte tokens; the query that has read the whole character is the second
(the last byte), so that is the position the view opens at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import numpy as np

from core.engine import tokens
from core.engine.trace import Trace


@dataclass(frozen=True)
class Example:
    key: str
    prompt: str
    query: str  # the word whose (last) token is the query
    target: str  # the word the query should read
    other: str  # the word it could be confused with


SHE = Example("she", "小明把书交给小红，因为她明天要考试。", "她", "小红", "小明")


def locate(pieces: Sequence[Any], word: str) -> list[int]:
    """The positions of the tokens that make up the first occurrence of ``word`` in the sequence (its
    byte tokens included), found in the pieces' own bytes; [] when the word is not there."""
    spans, data = [], b""
    for p in pieces:
        b = tokens._bytes_of(p)
        spans.append((len(data), len(data) + len(b)))
        data += b
    at = data.find(word.encode("utf-8"))
    if at < 0:
        return []
    end = at + len(word.encode("utf-8"))
    return [i for i, (s, e) in enumerate(spans) if s < end and e > at]


@dataclass(frozen=True)
class View:
    """Where the example is seen best: the query position, the layer and head whose query row puts the
    most weight on the target, and that weight (and the other word's) in the same row."""

    query_pos: int
    query_positions: tuple[int, ...]
    target_positions: tuple[int, ...]
    other_positions: tuple[int, ...]
    layer: int
    head: int
    on_target: float
    on_other: float

    def fill(self) -> dict[str, Any]:
        """The values the heads page's sentence about this view quotes (``heads.example_text``): the query
        positions, the layer and head, both weights as percentages and both words' position spans."""
        def span(ps: tuple[int, ...]) -> str:
            return "–".join(map(str, (ps[0], ps[-1]))) if ps else "–"

        return {"q": ", ".join(map(str, self.query_positions)), "pos": self.query_pos, "l": self.layer, "h": self.head,
                "t": f"{self.on_target:.0%}", "o": f"{self.on_other:.0%}", "tp": span(self.target_positions),
                "op": span(self.other_positions)}


def best_view(pieces: Sequence[Any], layers: Iterable[np.ndarray], ex: Example = SHE) -> View | None:
    """Scan every layer's weights ([H, T, T] each, in order) for the head whose row at the query's last
    token sums the most weight over the target's tokens. None when a word is missing from the pieces."""
    qs, ts, os_ = locate(pieces, ex.query), locate(pieces, ex.target), locate(pieces, ex.other)
    if not qs or not ts:
        return None
    q = qs[-1]
    best: tuple[float, int, int, float] | None = None
    for layer, w in enumerate(layers):
        rows = np.asarray(w)[:, q, :]  # [H, T]: every head's weights from the query
        on_t = rows[:, ts].sum(axis=1)
        h = int(np.argmax(on_t))
        if best is None or on_t[h] > best[0]:
            best = (float(on_t[h]), layer, h, float(rows[h, os_].sum()) if os_ else 0.0)
    assert best is not None
    return View(q, tuple(qs), tuple(ts), tuple(os_), best[1], best[2], best[0], best[3])


def view_of(trace: Trace, weights: Callable[[int], np.ndarray | None], ex: Example = SHE) -> View | None:
    """``best_view`` read off a trace of the example's own prompt (without the chat template), one layer's
    weights at a time (``weights(layer)``: [H, T, T], or None when that layer cannot be had); None for any
    other prompt, a chat-templated one, or a layer missing."""
    if trace.prompt != ex.prompt or trace.chat:
        return None
    layers = []
    for layer in range(trace.n_layers):
        w = weights(layer)
        if w is None:
            return None
        layers.append(w)
    return best_view(trace.tokens, layers, ex)


def link(view: View, lang: str, ex: Example = SHE, page: str = "heads") -> str:
    """The relative link that opens the heads page at this view: the prompt without the chat template,
    the layer, the head and the query position."""
    return f"{page}?" + urlencode({"lang": lang, "prompt": ex.prompt, "chat": "0", "layer": view.layer,
                                    "head": view.head, "pos": view.query_pos})
