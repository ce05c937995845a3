"""Bad input never gives a traceback: odd prompts and broken model folders each give a clear
message in the page, the previous model stays in use, and the trace cache stays bounded.

Pages are driven through AppTest (the sidebar prompt is the text area with key "prompt"); forward
passes are counted by wrapping ``core.backends.trace_ids``.
"""

from __future__ import annotations

import shutil

import pytest

from conftest import ROOT
from core.engine.trace import MAX_TOKENS
from core.engine.types import EMBEDDED_ID

APP = str(ROOT / "app.py")


def _tour(prompt: str | None = None, step: int = 1):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["step"] = str(step)
    if prompt is not None:
        at.session_state["prompt"] = prompt
    at.switch_page("pages/tour.py")
    return at.run()


def _messages(at) -> str:
    return " | ".join(m.value for kind in (at.error, at.warning, at.info) for m in kind)


@pytest.mark.parametrize("prompt", ["", "   \n\t  "])
def test_empty_prompt_gives_hint_and_runs_no_model(forward_count, prompt):
    at = _tour(prompt)
    assert not at.exception
    assert any("prompt" in m.value.lower() for m in at.info), _messages(at)
    assert forward_count["n"] == 0
    assert not at.metric


def test_huge_prompt_is_truncated_with_a_notice(forward_count):
    prompt = ("The quick brown fox jumps over the lazy dog. " * 450)[:19_900]  # ≈ 4,400 tokens: over the 4,096 limit
    at = _tour(prompt)
    assert not at.exception
    assert at.warning and f"{MAX_TOKENS:,}" in at.warning[0].value, _messages(at)  # "4,096", as the metric says it
    assert at.metric[0].value == f"{MAX_TOKENS:,}"  # the tokens stage shows the traced length
    assert forward_count["n"] == 1


@pytest.mark.parametrize(
    "prompt, must_show",
    [
        ("I ❤️ transformers 🤖🚀", "‹F0"),  # an emoji is split into byte tokens, shown as 🤖‹F0 9F …›
        ("مرحبا بالعالم، كيف حالك؟", None),  # Arabic, right to left
        ("שלום עולם", None),  # Hebrew
        ("bell\x07 and nul\x00 inside", "␀"),  # control characters are made visible
    ],
)
def test_odd_unicode_prompts_render(forward_count, prompt, must_show):
    at = _tour(prompt)
    assert not at.exception, at.exception
    assert not at.error, _messages(at)
    assert at.metric and int(at.metric[0].value.replace(",", "")) >= 2
    chips = [m.value for m in at.main.markdown if "<span" in m.value]
    assert chips, "the token chips are shown"
    if must_show:
        assert must_show in chips[0]
    assert "\x00" not in chips[0] and "\x07" not in chips[0] and "\ufffd" not in chips[0]
    assert forward_count["n"] <= 1  # at most one forward pass (0 when a previous test cached it)


def test_empty_prompt_on_other_stages_and_pages():
    for step in (0, 4, 7):
        at = _tour("", step)
        assert not at.exception and at.info
    from streamlit.testing.v1 import AppTest

    for stem in ("quiz", "references"):
        at = AppTest.from_file(APP, default_timeout=180)
        at.session_state["prompt"] = ""
        at.switch_page(f"pages/{stem}.py")
        at.run()
        assert not at.exception


# ---------------------------------------------------------------------------------------------
# broken model folders: a clear message, and the previous model stays in use


@pytest.fixture(scope="module")
def bad_folders(tmp_path_factory, tiny_dirs, smol):
    import torch
    from transformers import BertConfig, BertForMaskedLM

    base = tmp_path_factory.mktemp("bad")
    bert = base / "bert"
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=smol.facts.vocab_size, hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=64)).save_pretrained(str(bert))
    smol.tokenizer.save_pretrained(str(bert))
    corrupt = base / "corrupt"
    shutil.copytree(tiny_dirs["llama"], corrupt)
    (corrupt / "config.json").write_text('{"model_type": "llama", "hidden_size": 4', encoding="utf-8")
    return {"missing": str(base / "does-not-exist"), "bert": str(bert), "corrupt": str(corrupt)}


@pytest.mark.parametrize("which, words", [("missing", "no folder"), ("bert", "not a causal"), ("corrupt", "not valid json")])
def test_bad_model_folder_keeps_previous_model(bad_folders, which, words, monkeypatch):
    monkeypatch.setenv("XRAY_ALLOW_LOCAL", "1")  # the local-folder box exists only when the operator turns it on
    at = _tour("Hello world", step=1)
    assert not at.exception and at.metric
    tokens_before = at.metric[0].value
    at.selectbox(key="model_pick").set_value("__local__").run()
    at.text_input(key="model_path").input(bad_folders[which]).run()
    assert not at.exception, at.exception
    errors = " ".join(e.value for e in at.error)
    assert words in errors.lower(), errors
    assert at.session_state["model_spec_ok"] == EMBEDDED_ID  # the previous model is kept …
    assert at.metric and at.metric[0].value == tokens_before  # … and the page still shows its trace
    assert any(EMBEDDED_ID in c.value for c in at.caption)  # the badge names the model in use
