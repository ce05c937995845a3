"""A model that cannot load is refused in the user's language, and no page or exported file shows a
server path (issue 15: "answered with a sentence in the user's language"; "a link must not be a way to
learn which paths exist on the server").

* every ``ModelLoadError`` carries a code; each code (and each translated piece of a message) has its
  sentence in English and Chinese; ``str(e)`` stays the English sentence (the CLI prints it);
* a Chinese page says why an offered model cannot load in Chinese, naming no path;
* the references page and an exported trace describe where the weights came from without a path.
"""

from __future__ import annotations

import ast
import copy
import json
import pickle
from pathlib import Path

import pytest
import torch
from helpers.load_errors import HOME, _no_path
from safetensors.torch import save_file

from conftest import ROOT
from core import backends
from core.common import i18n, settings
from core.engine import hf
from core.engine.types import ConfigError, ModelLoadError, Phrase
from core.toy import run as toy_run

RAISERS = ("core/engine/hf.py", "core/web/offer.py", "core/toy/run.py", "core/web/cache.py")  # cache.py: the bar's first words
# A small Llama config (about 0.3 M parameters): cheap to size and to build on the meta device.
SMALL_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 128, "rope_theta": 10000.0, "tie_word_embeddings": False,
}


@pytest.fixture(autouse=True)
def _no_operator_setting(monkeypatch):
    monkeypatch.delenv(settings.MODELS, raising=False)
    monkeypatch.delenv(settings.ALLOW_LOCAL, raising=False)


def _refusal(spec: Path | str) -> ModelLoadError:
    with pytest.raises(ModelLoadError) as e:
        backends.load_model(str(spec))
    return e.value


# ---------------------------------------------------------------------------------------------
# every code has its sentence, in both languages


def _codes_and_pieces() -> tuple[set[str], set[str]]:
    """The codes every ``ModelLoadError(...)`` in core raises, and the other ``load.*`` keys the loaders name
    (``load.part_*`` pieces of a message, the cache's ``load.cache_*`` reasons, progress steps)."""
    codes, pieces = set(), set()
    for rel in RAISERS:
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ModelLoadError":
                arg = node.args[0]
                if isinstance(arg, ast.Name):  # NOT_A_MODEL
                    codes.add(getattr(hf, arg.id))
                else:
                    assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), (rel, ast.dump(arg))
                    codes.add(arg.value)
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("load.")
                    and not node.value.startswith("load.err_") and " " not in node.value):
                pieces.add(node.value)
    return codes, pieces


def test_every_code_and_piece_has_a_sentence_in_both_languages():
    codes, pieces = _codes_and_pieces()
    assert len(codes) >= 25 and {"not_a_model", "too_big", "coverage", "refused", "toy_broken"} <= codes
    known = i18n.catalogue()
    used = {f"load.err_{c}" for c in codes} | pieces
    assert sorted(used - set(known)) == []  # every raise site has its sentence …
    assert {k for k in known if k.startswith("load.")} == used  # … and no sentence is left without a raise site
    # (both languages, same placeholders: test_app's i18n.problems() check, for every key)
    for key in used:  # the Chinese sentence is Chinese
        assert any("\u4e00" <= ch <= "\u9fff" for ch in known[key]["zh"]), key


def test_the_error_keeps_its_code_and_says_english_by_default():
    e = ModelLoadError("too_big", n="1.27 B", need="5.1 GB", allowed="4.0 GB", env=settings.MEMORY_BUDGET_GB)
    assert e.code == "too_big" and e.known
    assert str(e) == e.text("en") == ("This model has about 1.27 B parameters: it needs about 5.1 GB in float32; "
                                      f"this server allows 4.0 GB (the operator sets this with {settings.MEMORY_BUDGET_GB}).")
    assert "本服务器只允许 4.0 GB" in e.text("zh")
    for again in (pickle.loads(pickle.dumps(e)), copy.copy(e)):
        assert type(again) is ModelLoadError and again.code == e.code and str(again) == str(e)


def test_an_unknown_code_falls_back_to_its_english_text():
    e = ModelLoadError("no_such_code", what="x")
    assert not e.known and "no_such_code" in str(e) and "⟦" not in str(e)
    assert e.text("zh") == str(e)


def test_pieces_are_said_in_the_language_of_the_sentence():
    parts = [Phrase("load.part_missing", {"n": "2", "names": "`a`, `b`"}), Phrase("load.part_unexpected", {"n": "1", "names": "`c`"})]
    e = ModelLoadError("refused", parts=parts)
    assert str(e) == ("This model is refused. Weights missing from its files (2): `a`, `b`. "
                      "Tensors in its files that no weight of this architecture uses (1): `c`.")
    assert e.text("zh") == "拒绝加载该模型。文件中缺少的权重（2 个）：`a`, `b`。文件中有该架构的任何权重都用不到的张量（1 个）：`c`。"
    reason = ConfigError("not_positive", "num_attention_heads = 0").reason()
    assert "greater than 0" in reason.text("en") and "必须大于 0" in reason.text("zh")


def test_a_library_message_is_shown_without_paths():
    text = (f"OSError: '/srv/models/qwen/config.json' and {HOME}/models/x/tokenizer.json; see "
            "https://huggingface.co/docs/transformers/x, Qwen/Qwen2.5-0.5B-Instruct, ~/.cache/transformer-xray, fp16 / bf16")
    shown = hf.hide_paths(text)
    assert shown == ("OSError: 'config.json' and ~/models/x/tokenizer.json; see https://huggingface.co/docs/transformers/x, "
                     "Qwen/Qwen2.5-0.5B-Instruct, ~/.cache/transformer-xray, fp16 / bf16"), shown


# ---------------------------------------------------------------------------------------------
# real refusals, in both languages, naming no path


def test_refusals_are_translated_and_name_no_path(tmp_path, monkeypatch):
    cases = {}
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "config.json").write_text('{"model_type": "llama", "hidden_size": 4', encoding="utf-8")
    cases["corrupt"] = ("config_json", "is not valid JSON", "不是合法的 JSON")
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "config.json").write_text('{"a": ' + "[" * 5000 + "]" * 5000 + "}", encoding="utf-8")
    cases["deep"] = ("config_too_deep", "nested more than", "嵌套超过")
    (tmp_path / "array").mkdir()
    (tmp_path / "array" / "config.json").write_text("[1, 2]", encoding="utf-8")
    cases["array"] = ("config_not_object", "not one JSON object", "不是一个 JSON 对象")
    (tmp_path / "archs").mkdir()
    (tmp_path / "archs" / "config.json").write_text(json.dumps({**SMALL_LLAMA, "architectures": 5}), encoding="utf-8")
    cases["archs"] = ("config_unusable", "must be a list of names", "必须是名称列表")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text(json.dumps(SMALL_LLAMA), encoding="utf-8")
    (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"not really")
    cases["bin"] = ("no_safetensors", "pickled .bin weights are never loaded", "从不加载 pickle 格式的 .bin 权重")
    (tmp_path / "one-tensor").mkdir()
    (tmp_path / "one-tensor" / "config.json").write_text(json.dumps(SMALL_LLAMA), encoding="utf-8")
    save_file({"unrelated.weight": torch.zeros(4)}, str(tmp_path / "one-tensor" / "model.safetensors"))
    cases["one-tensor"] = ("coverage", "Weights missing from its files", "文件中缺少的权重")
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "config.json").write_text(json.dumps({**SMALL_LLAMA, "hidden_size": 4096, "intermediate_size": 16384,
                                                              "num_hidden_layers": 64, "num_attention_heads": 32,
                                                              "num_key_value_heads": 8}), encoding="utf-8")
    cases["big"] = ("too_big", "this server allows 1.0 GB", "本服务器只允许 1.0 GB")
    monkeypatch.setenv(settings.MEMORY_BUDGET_GB, "1")
    for name, (code, en, zh) in cases.items():
        e = _refusal(tmp_path / name)
        assert e.code == code, (name, e.code, str(e))
        assert en in str(e) and zh in e.text("zh"), (name, str(e), e.text("zh"))
        assert en not in e.text("zh")  # the Chinese page gets no English sentence
        for text in (str(e), e.text("zh")):
            _no_path(text, tmp_path)
    nowhere = _refusal(tmp_path / "no-such-folder")
    assert nowhere.code == "not_a_model" and "没有找到本应用能加载的模型" in nowhere.text("zh")
    listed = _refusal(tmp_path / "one-tensor")  # the list of missing weights is cut, in either language
    assert "… and" in str(listed) and "另有" in listed.text("zh") and "`model.embed_tokens.weight`" in listed.text("zh")


def test_a_broken_toy_names_no_server_path(tmp_path):
    with pytest.raises(ModelLoadError) as e:
        toy_run.load_trained(folder=tmp_path / "toy-gone")
    assert e.value.code == "toy_broken" and "`toy-gone`" in str(e.value) and "make toy" in e.value.text("zh")
    for text in (str(e.value), e.value.text("zh")):
        _no_path(text, tmp_path)


# ---------------------------------------------------------------------------------------------
# one error shape: every refusal core raises is a CodedError, said in the page's language


CODED = {"UnsupportedArchitectureError": "arch.err_", "EmptyPromptError": "prompt.err_", "ConfigError": "anatomy.err_",
         "NoChatTemplateError": "chat.err_"}


def test_every_coded_raise_in_core_has_a_sentence_in_both_languages():
    """Every ``UnsupportedArchitectureError(...)`` / ``EmptyPromptError(...)`` / ``ConfigError(...)`` in core/
    names a code (no English sentence as its message), and each code has its sentence in en and zh."""
    known, seen = i18n.catalogue(), set()
    for path in sorted((ROOT / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(getattr(node, "func", None), "id", None)
            if not isinstance(node, ast.Call) or name not in CODED or not node.args:
                continue
            arg = node.args[0]
            if isinstance(arg, ast.JoinedStr):  # f"no_{which}_norm": each value it can take
                codes = [f"no_{w}_norm" for w in ("attn", "mlp")]
            elif isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                codes = [arg.value]
            else:  # a code chosen at run time (config.py's _refuse(code, …)): its codes are config.CODES
                continue
            for code in codes:
                assert code.isidentifier(), (path.name, code)  # a code, not a sentence
                key = CODED[name] + code
                assert key in known, (path.name, key)
                assert any("\u4e00" <= ch <= "\u9fff" for ch in known[key]["zh"]), key
                seen.add(key)
    assert {"arch.err_no_attn_or_mlp", "arch.err_not_pre_norm", "prompt.err_empty", "anatomy.err_bad_value"} <= seen


def test_the_error_shapes_are_one():
    from core.engine.types import CodedError, EmptyPromptError, UnsupportedArchitectureError
    from core.gen.chat_template import NoChatTemplateError

    for e in (UnsupportedArchitectureError("no_lm_head", model="X"), EmptyPromptError("empty"),
              ConfigError("not_positive", "vocab_size = -5"), NoChatTemplateError("no_template")):
        assert isinstance(e, CodedError) and e.known and str(e) == e.text("en")
        assert any("\u4e00" <= ch <= "\u9fff" for ch in e.text("zh")), e.key
        again = pickle.loads(pickle.dumps(e))
        assert type(again) is type(e) and again.code == e.code and str(again) == str(e)
    c = ConfigError("not_positive", "vocab_size = -5")
    assert (c.code, c.detail) == ("not_positive", "vocab_size = -5") and c.reason().text("zh") == c.text("zh")
