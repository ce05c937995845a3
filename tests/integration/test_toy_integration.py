"""The toy transformer: equal to HF where it copies HF, self-consistent everywhere, and it learned something."""

from __future__ import annotations

import pytest

from conftest import ROOT


def _apptest(lang: str, model: str | None = None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["lang"] = lang
    if model:
        at.query_params["model"] = model
    at.switch_page("pages/toy.py")
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_renders(lang):
    at = _apptest(lang)
    title = "Toy transformer" if lang == "en" else "玩具 Transformer"
    assert at.title[0].value == title
    assert len(at.get("plotly_chart")) >= 3 and len(at.dataframe) == 2
    facts = at.dataframe[0].value
    assert facts.shape == (16, 3) and "30" in facts.iloc[:, 2].tolist()  # SmolLM2's 30 layers beside the toy's 2
    verdicts = at.dataframe[1].value.iloc[:, -1].tolist()
    assert verdicts[0] == ("cannot tell A from B" if lang == "en" else "无法区分 A 与 B") and len(set(verdicts)) == 2
    assert not [m for m in at.markdown if "⟦" in m.value]  # no missing i18n key


def test_page_with_toy_as_sidebar_model_and_empty_prompt():
    at = _apptest("en", model="toy")
    assert at.session_state["model_spec_ok"] == "toy"
    assert any(b.label == "Download trace (.npz)" for b in at.get("download_button"))
    at.session_state["prompt"] = "   "
    at.run()
    assert not at.exception and any("Type a prompt" in i.value for i in at.info)


def test_page_live_run_cut_short_warns(monkeypatch):
    """The page's live run, its time budget spent at once: a warning with steps done / requested, no success box."""
    import core.toy.train as toy_train

    at = _apptest("en")
    monkeypatch.setattr(toy_train, "LIVE_SECONDS", 0.0)
    at.slider(key="toy_train_steps").set_value(50).run()
    at.button(key="toy_train_go").click().run()
    assert not at.exception
    assert not at.success and any(w.value.startswith("Stopped after 1 of 50 steps") for w in at.warning)
    res = at.session_state["toy_live"]
    assert res["steps_done"] == 1 and not res["completed"]
    monkeypatch.setattr(toy_train, "LIVE_SECONDS", 1e6)  # a run that finishes: a success, and no chart drawn twice
    at.button(key="toy_train_go").click().run()
    assert not at.exception and at.success and not at.warning
    assert at.success[0].value.startswith("Trained all 50 steps in")


def test_toy_page_notes_are_in_the_page_language(smol):
    """With the chat switch on (SmolLM2's default), the toy's byte tokenizer has no template: the page says
    so in the reader's language (the trace's own note is English, for the export)."""
    from conftest import all_text, app_run

    at = app_run("toy", lang="zh", chat="1")
    text = all_text(at)
    assert not at.exception and "这个模型的分词器没有对话模板" in text and "This tokenizer has no chat template" not in text
