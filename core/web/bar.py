"""The app's one progress bar: a ``core.common.progress.Progress`` drawn with ``st.progress``, its words said
in the reader's language.

``bar(done, total, words)`` moves to ``done / total`` and says the computation's words, or (until it says
any, or always with ``keep=True``) the bar's own, with ``{done}``, ``{total}``, ``{pct}`` filled in. Every
long computation of the pages draws through it, in the script's thread.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from core.common.progress import share
from core.engine.types import Phrase, say


def text(done: int, total: int, words: Phrase | str | None, lang: str, share_first: bool = False) -> str:
    """What a bar says: ``words`` in ``lang`` (a Phrase of the catalogue; plain text as it is), after how
    far it is when ``share_first`` ("42% · Loading …"; the share capped to 0 … 100 %)."""
    said = "" if words is None else say(words, lang)
    return f"{share(done, total):.0%} · {said}" if share_first else said


class Bar:
    """A progress bar in the page (or in ``slot``, an element it redraws); a ``Progress`` to pass on."""

    def __init__(self, words: Phrase | str | None = None, *, keep: bool = False, share_first: bool = False, slot: Any = None,
                 lang: str | None = None) -> None:
        self.own, self.keep, self.share_first = words, keep, share_first
        self.lang = lang or st.session_state.get("lang", "en")
        self.done, self.total, self.said = 0, 1, None
        self.slot = st.progress(0.0, text=self.text()) if slot is None else slot
        if slot is not None:
            self.draw()

    def __call__(self, done: int, total: int, words: Phrase | str | None = None) -> None:
        self.done, self.total = int(done), int(total)
        if words is not None:
            self.said = words
        self.draw()

    def text(self) -> str | None:
        words = self.own if self.keep or self.said is None else self.said
        if words is None:
            return None
        if isinstance(words, Phrase) and words is self.own:  # the bar's own sentence: the counts filled in
            counts = {"done": f"{self.done:,}", "total": f"{self.total:,}", "pct": round(100 * share(self.done, self.total))}
            words = Phrase(words.key, {**counts, **words.params})
        return text(self.done, self.total, words, self.lang, self.share_first)

    def draw(self) -> None:
        """Draw it again as it stands (a waiting script's tick: where Streamlit may stop it for a rerun)."""
        self.slot.progress(share(self.done, self.total), text=self.text())

    def empty(self) -> None:
        self.slot.empty()

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.empty()
