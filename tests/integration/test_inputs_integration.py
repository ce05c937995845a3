"""Ordinary inputs never crash a page (issue 15, section 3).

* A pasted config.json is validated once, by ``core.engine.config``: every impossible input is a
  ``ConfigError`` with a code, refused alike by the reader, the anatomy page's analysis and the KV
  calculator, and shown on both pages as a sentence in the user's language (no traceback).
* A one-token prompt, and a model with one layer and one head, leave every page working: a range of
  one value (one position, one layer, one head, one generation pass) is shown as text, not as a slider
  Streamlit refuses.
* Text the user typed is never rendered as Markdown/HTML (the Tokens page's "PCA words" box).
"""

from __future__ import annotations

import pytest
from helpers.inputs import CASES, KV_BASE, _refusal, _text
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from core.common import i18n
from core.engine import config as cfgread
from core.gen import kvcalc
from core.stream import anatomy
from core.web.nav import STEMS
from core.web.widgets import code, md

APP = str(ROOT / "app.py")
LANGS = ("en", "zh")

# ---------------------------------------------------------------------------------------------
# pasted configs (the cases: helpers.inputs.CASES)



def test_real_configs_still_read(tiny_loaded, smol):
    """The validation refuses nothing real: the presets, the seeds' Qwen2.5, every loaded model's own
    config, a transformers-5 per-layer-type rope, whole floats, and 0 experts for a dense model."""
    assert [g.name for g in kvcalc.load_presets()]
    assert anatomy.analyse_config(anatomy.QWEN25_05B_CONFIG).num_key_value_heads == 2
    for loaded in [smol, *tiny_loaded.values()]:
        r = anatomy.analyse_config(anatomy.config_of(loaded))
        assert r.num_hidden_layers == loaded.facts.n_layers
        assert kvcalc.from_config(anatomy.config_of(loaded)).n_kv_heads == loaded.facts.n_kv_heads
    gemma = {**KV_BASE, "rope_parameters": {"full_attention": {"rope_theta": 1e6, "rope_type": "default"},
                                            "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}}
    assert cfgread.rope(cfgread.parse(gemma)) == (1e6, "default")
    assert cfgread.geometry({**KV_BASE, "hidden_size": 4096.0, "num_experts": 0}).d_model == 4096
    # transformers' own default configs: Qwen2-MoE says sliding_window=0 (no window), XGLM names its heads
    # attention_heads
    from transformers import Qwen2MoeConfig, XGLMConfig

    assert cfgread.geometry(cfgread.check(Qwen2MoeConfig().to_dict())).n_heads == 16
    xglm = cfgread.geometry(cfgread.check(XGLMConfig().to_dict()))
    assert (xglm.n_layers, xglm.n_heads, xglm.head_dim) == (24, 16, 64)


# ---------------------------------------------------------------------------------------------
# the same inputs on the pages


def _page(stem: str, lang: str, prompt: str | None = None, model: str | None = None, chat: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["lang"] = lang
    if chat is not None:
        at.query_params["chat"] = chat
    if model is not None:
        at.query_params["model"] = model
    if prompt is not None:
        at.session_state["prompt"] = prompt
    at.switch_page(f"pages/{stem}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("stem, key, base", [("anatomy", "anatomy_json", anatomy.QWEN25_05B_CONFIG), ("kv_cache", "kv_cache_cfg", KV_BASE)])
def test_pasted_configs_are_refused_on_the_pages(stem, key, base, lang):
    at = _page(stem, lang)
    if stem == "kv_cache":
        at.selectbox(key="kv_cache_preset").set_value(at.selectbox(key="kv_cache_preset").options[-1]).run()
    for case, field, raw, expected in CASES:
        text = _text(base, field, raw)
        at.text_area(key=key).set_value(text).run()
        assert not at.exception, (case, [e.value for e in at.exception])
        e = _refusal(cfgread.parse, text)
        want = i18n.t(f"anatomy.err_{expected}", lang, detail=code(e.detail))
        assert [x.value for x in at.error] == [want], case
    at.text_area(key=key).set_value(_text(base, "max_position_embeddings", "-5")).run()
    assert "-640" not in " ".join(m.value for m in [*at.markdown, *at.info, *at.caption])


# ---------------------------------------------------------------------------------------------
# a one-token prompt, a one-layer one-head model


def _tour_layer_step() -> int:
    from core.learn import tour  # deferred: only this helper reads the stages

    return next(i for i, s in enumerate(tour.STAGES) if s.key == "blocks")  # the stage with a layer picker


def _visit_all(at: AppTest, lang: str) -> dict[str, list[str]]:
    """Every registered page, plus the views behind a choice: the calculator's real row, the tour's
    layer stage, and the generation stepper after prefill and after one more token."""
    fails: dict[str, list[str]] = {}

    def note(where: str) -> None:
        if at.exception:
            fails[where] = [e.value[:200] for e in at.exception][:2]

    for stem in STEMS:
        at.switch_page(f"pages/{stem}.py")
        if stem == "tour":
            at.query_params["step"] = str(_tour_layer_step())
        at.run()
        note(stem)
        if stem == "tour":  # a browser clears the URL's parameters when it leaves a page: the tour's step
            at.query_params.pop("step", None)  # is not the stepper's (a link's step=N there replays a run)
        if stem == "attention_lab" and not at.exception:
            at.radio(key="attention_lab_preset").set_value("real").run()
            note("attention_lab (real row)")
        if stem == "generation" and not at.exception:
            at.button(key="generation_prefill").click().run()
            note("generation (after prefill)")
            if not at.exception and not at.button(key="generation_next").disabled:
                at.button(key="generation_next").click().run()
                note("generation (after one token)")
    return fails


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("prompt", ["Hi", "<|endoftext|>"])
def test_one_token_prompt_on_every_page(smol, prompt, lang):
    from core.engine.tokens import encode

    assert len(encode(smol.tokenizer, prompt, chat=False).ids) == 1
    at = _page("journey", lang, prompt, chat="0")  # the bare one-token prompt: the chat template off
    assert not _visit_all(at, lang)
    assert at.session_state["generation_stepper"].started


@pytest.fixture(scope="module")
def one_layer_one_head(tmp_path_factory, smol):
    """A Llama with one layer and one attention head (SmolLM2's tokenizer), as a local folder."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(smol.tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=256, rope_theta=10000.0,
                      tie_word_embeddings=False, architectures=["LlamaForCausalLM"])
    folder = tmp_path_factory.mktemp("one") / "l1h1"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(folder), safe_serialization=True)
    smol.tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture
def offered_l1h1(one_layer_one_head, monkeypatch):
    """The one-layer model offered by the server under the id ``l1h1`` (what a link may name)."""
    monkeypatch.setenv("XRAY_MODELS", f"l1h1={one_layer_one_head}")
    return "l1h1"


@pytest.mark.parametrize("lang", LANGS)
def test_one_layer_one_head_model_on_every_page(offered_l1h1, one_layer_one_head, lang):
    at = _page("journey", lang, "The cat sat on the mat", model=offered_l1h1)
    assert at.session_state["model_spec_ok"] == str(one_layer_one_head.resolve())
    assert not _visit_all(at, lang)
    stp = at.session_state["generation_stepper"]
    assert stp.loaded.facts.n_layers == 1 and stp.loaded.facts.n_heads == 1 and len(stp.records) == 2
    at.switch_page("pages/heads.py")
    at.run()
    for label in ("ui.layer", "ui.head"):  # the one layer and the one head, said as text
        assert i18n.t("ui.only_value", lang, label=i18n.t(label, lang), value=0) in [m.value for m in at.markdown]


def test_slider_follows_a_shorter_prompt(smol):
    """A position chosen on a long prompt is pulled into the next prompt's range (no out-of-range slider)."""
    at = _page("heads", "en", "one two three four five six seven")
    at.slider(key="heads_q").set_value(5).run()
    for prompt, top in (("Hi", None), ("Hello world", 1)):
        at.session_state["prompt"] = prompt
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if top is not None:
            assert at.slider(key="heads_q").value <= top


# ---------------------------------------------------------------------------------------------
# user text inside Markdown


def _markdown_texts(at: AppTest) -> list[str]:
    kinds = ("markdown", "caption", "info", "warning", "error", "success", "subheader", "header", "title")
    return [e.value for k in kinds for e in getattr(at, k)]


@pytest.mark.parametrize("payload", ["<img src=x onerror=alert(1)>", "![pixel](http://127.0.0.1:9/x.png)"])
def test_pca_words_are_shown_as_text(smol, payload):
    at = _page("tokens", "en", "Hi")
    at.text_input(key="tokens_words").input(f"cat, dog, {payload}").run()
    assert not at.exception
    texts = _markdown_texts(at)
    assert any(md(payload) in t for t in texts), "the words are listed, escaped"
    assert not any("<img" in t for t in texts)
    assert not any("](http" in t for t in texts)
