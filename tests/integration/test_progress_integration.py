"""One progress shape (issue 27): every long computation reports ``progress(done, total, words)``
(core.common.progress), whole numbers with done ≤ total ending at done == total, its words a sentence of the
catalogue said in both languages; the jobs and the byte-bounded cache pass the same three on to every
session that waits; and one bar (core.web.bar) draws them all, in the reader's language."""

from __future__ import annotations

import pytest

from core.engine.types import Phrase
from core.web import bar


def _bar_script():
    import streamlit as st

    from core.engine.types import Phrase
    from core.web.bar import Bar

    st.session_state["lang"] = st.query_params.get("lang", "en")
    Bar(Phrase("serving.progress"), keep=True)(2, 5, Phrase("serving.step_done"))  # its own words, the counts filled
    b = Bar(Phrase("measure.running"))
    b(1, 4, Phrase("diagnose.progress_decode", {"done": 1, "total": 4, "n": 9}))  # the computation's words replace them
    Bar(Phrase("load.start"), share_first=True)(42, 100)  # no words yet: the bar's own, after how far


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_one_bar_says_the_words_in_the_readers_language(lang):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_bar_script)
    at.query_params["lang"] = lang
    at.run()
    assert not at.exception
    got = [(p.proto.value, p.proto.text) for p in at.get("progress")]
    want = [(40, Phrase("serving.progress", {"pct": 40}).text(lang)),
            (25, Phrase("diagnose.progress_decode", {"done": 1, "total": 4, "n": 9}).text(lang)),
            (42, "42% · " + Phrase("load.start").text(lang))]
    assert got == want
    assert bar.text(3, 4, None, lang) == "" and bar.text(3, 4, "plain", lang, share_first=True) == "75% · plain"
