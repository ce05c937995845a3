"""The app shell: every registered page runs in both languages, every string has both languages,
and looking at another layer reads the cached trace instead of running the model."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from core import backends
from core.engine import i18n
from core.web.nav import STEMS

APP = str(ROOT / "app.py")


def registered_pages() -> list[str]:
    """Every page stem the router registers (core.web.nav.PAGES)."""
    return list(STEMS)


def test_every_string_has_both_languages():
    assert not i18n.problems(), i18n.problems()


def test_every_key_used_in_code_exists():
    """Literal keys passed to ui.t(...) / t(...) in pages and core all exist in the catalogue."""
    import re

    known = set(i18n.catalogue())
    missing = []
    for f in [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *(ROOT / "core").glob("*.py")]:
        for key in re.findall(r"""\bt\(\s*["']([a-z_0-9]+\.[a-z_0-9.]+)["']""", f.read_text(encoding="utf-8")):
            if key not in known:
                missing.append(f"{f.name}: {key}")
    assert not missing, missing


def test_journey_is_registered():
    assert "journey" in registered_pages()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_page_runs_without_exception(lang):
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params["lang"] = lang
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    failures = {}
    for stem in registered_pages():
        at.switch_page(f"pages/{stem}.py")
        at.run()
        if at.exception:
            failures[stem] = [e.value for e in at.exception][:2]
        elif stem != "journey":
            assert at.title or at.header or at.markdown, f"{stem} rendered nothing"
    assert not failures, failures


def test_journey_shows_the_real_trace_in_both_languages():
    at = AppTest.from_file(APP, default_timeout=240)
    at.run()
    text = " ".join(m.value for m in at.markdown)
    assert "3575" in text and "capital" in text  # the real token id of " capital" in SmolLM2's vocabulary
    assert at.title[0].value == "The journey of a sentence"
    at.session_state["lang"] = "zh"
    at.run()
    assert at.title[0].value == "一句话的旅程"


def test_choosing_a_layer_never_runs_the_model_again():
    at = AppTest.from_file(APP, default_timeout=240)
    at.run()
    before = backends.FORWARD_PASSES
    slider = at.slider(key="journey_layer")
    for layer in (0, 7, 29):
        slider.set_value(layer).run()
        assert not at.exception
        assert any(f"resid[{layer}]" in c.value for c in at.code)
    assert before == backends.FORWARD_PASSES


def test_empty_prompt_gives_a_hint_and_no_model_call():
    at = AppTest.from_file(APP, default_timeout=240)
    at.run()
    before = backends.FORWARD_PASSES
    at.text_area(key="prompt").set_value("   ").run()
    assert not at.exception
    assert any("prompt" in i.value.lower() for i in at.info)
    assert before == backends.FORWARD_PASSES


def test_wrong_model_folder_keeps_the_previous_model(tmp_path, monkeypatch):
    monkeypatch.setenv("XRAY_ALLOW_LOCAL", "1")  # the local-folder box exists only when the operator turns it on
    at = AppTest.from_file(APP, default_timeout=240)
    at.run()
    at.selectbox(key="model_pick").set_value("__local__").run()
    at.text_input(key="model_path").set_value(str(tmp_path / "missing")).run()
    assert not at.exception
    assert any("No folder" in e.value for e in at.error)
    assert at.session_state["model_spec_ok"] == "SmolLM2-135M-Instruct"
    assert at.title[0].value == "The journey of a sentence"
