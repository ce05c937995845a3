"""The model's loading bar says what it does, in the page's language, with how far it is (issue 28)."""

from __future__ import annotations

import re

from core.engine.types import Phrase
from core.web import bar, cache

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_a_cold_start_draws_its_bar_in_the_main_area(monkeypatch, smol):
    """issue 28: on a cold start the bar stood at the foot of the sidebar beside a blank page. The app loads
    the embedded model before it draws the sidebar, so the first load's bar is in the main area, in the
    link's language. (The loader is wrapped to leave its bar on screen; the model itself is the shared one.)"""
    import streamlit as st

    from conftest import app_run

    real = cache.get_model
    said = {}

    def get_model(spec):
        if not said:
            said["text"] = bar.text(50, 100, Phrase("load.step_load"), st.session_state.get("lang", "en"), share_first=True)
            st.progress(0.5, text=said["text"])
        return real(spec)

    monkeypatch.setattr(cache, "get_model", get_model)
    at = app_run("tokens", lang="zh")
    assert not at.exception
    main = [p.proto.text for p in at.main.get("progress")]
    assert said and said["text"] in main and not at.sidebar.get("progress"), (main, said)
    assert CJK.search(said["text"])
