"""The loader refuses what it cannot show honestly (issue 15, section 2, and the loader side of
section 1): missing or unexpected weights, a model bigger than the server's memory budget (decided
from config.json before anything is allocated), and it never tells whether a path exists."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.backends import load_model
from core.common import settings
from core.engine import budget, hf
from core.engine.types import ModelLoadError
from core.stream.anatomy import QWEN25_05B_CONFIG, QWEN25_05B_PARAMS

# A Llama-style config of about 1.27 B parameters (tied embeddings): 5.1 GB in float32.
BIG_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 144000, "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 4096, "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "float32",
}


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _copy_model(src: Path, dst: Path, edit) -> Path:
    """A copy of the model folder ``src`` whose weights ``edit(state_dict)`` changed."""
    shutil.copytree(src, dst)
    state = load_file(str(dst / "model.safetensors"))
    edit(state)
    save_file(state, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.fixture
def weight_reads(monkeypatch) -> list[str]:
    """The loader's steps that touch weights, recorded as they are called: ``weight_files`` (the weight
    files listed, their headers read next) and ``_from_pretrained`` (the model built, its weights allocated)."""
    calls: list[str] = []
    for name in ("weight_files", "_from_pretrained"):
        real = getattr(hf, name)

        def spy(*a, _name=name, _real=real, **kw):
            calls.append(_name)
            return _real(*a, **kw)

        monkeypatch.setattr(hf, name, spy)
    return calls


def _refusal(spec: Path | str) -> str:
    with pytest.raises(ModelLoadError) as e:
        load_model(str(spec))
    return str(e.value)


# ---------------------------------------------------------------------------------------------
# missing and unexpected weights


def test_config_with_one_unrelated_tensor_is_refused_naming_the_missing_weights(tmp_path, tiny_dirs):
    """Before: every weight was randomly initialised and the model was shown as the real one."""
    (tmp_path / "config.json").write_text((tiny_dirs["llama"] / "config.json").read_text())
    save_file({"unrelated.weight": torch.zeros(4, 4)}, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    msg = _refusal(tmp_path)
    assert "missing" in msg and "model.embed_tokens.weight" in msg, msg
    assert "more" in msg  # the list is shortened: the first names, then a count
    assert "unrelated.weight" in msg


def test_big_config_with_one_unrelated_tensor_is_refused_before_allocating(tmp_path, monkeypatch, weight_reads):
    """The issue's case: a 1.27 B-parameter config beside a one-tensor file grew the server by 4.5 GB."""
    monkeypatch.setenv(settings.MEMORY_BUDGET_GB, "1000")  # the budget allows it: the weight files are what is wrong
    (tmp_path / "config.json").write_text(json.dumps(BIG_LLAMA))
    save_file({"unrelated.weight": torch.zeros(8)}, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    rss = _rss_bytes()
    msg = _refusal(tmp_path)
    assert "missing" in msg and "model.layers.0.self_attn.q_proj.weight" in msg, msg
    assert weight_reads == ["weight_files"]  # the headers were read; the model was never built
    assert _rss_bytes() - rss < 1e9


def test_model_missing_one_layer_weight_is_refused(tmp_path, tiny_dirs):
    folder = _copy_model(tiny_dirs["llama"], tmp_path / "m", lambda s: s.pop("model.layers.1.mlp.down_proj.weight"))
    msg = _refusal(folder)
    assert "model.layers.1.mlp.down_proj.weight" in msg and "missing" in msg, msg


def test_unexpected_extra_tensor_is_refused(tmp_path, tiny_dirs):
    folder = _copy_model(tiny_dirs["qwen2"], tmp_path / "m", lambda s: s.update({"model.layers.7.extra.weight": torch.ones(3)}))
    msg = _refusal(folder)
    assert "model.layers.7.extra.weight" in msg, msg


def test_estimate_matches_the_tiny_models(tiny_loaded, tiny_dirs):
    for arch, loaded in tiny_loaded.items():
        cfg = json.loads((tiny_dirs[arch] / "config.json").read_text())
        real = loaded.model.num_parameters()
        assert budget.n_params(cfg) == real, (arch, budget.estimate_params(cfg), real)
        assert budget.n_params(loaded.model.config) == real, arch


def test_estimate_matches_qwen25_05b_published_count():
    assert budget.n_params(QWEN25_05B_CONFIG) == QWEN25_05B_PARAMS == 494_032_768


def test_estimate_of_a_big_config_matches_a_model_built_on_the_meta_device():
    from transformers import AutoModelForCausalLM, LlamaConfig

    with torch.device("meta"):  # shapes only: nothing allocated
        model = AutoModelForCausalLM.from_config(LlamaConfig(**{k: v for k, v in BIG_LLAMA.items() if k != "model_type"}))
    assert budget.n_params(BIG_LLAMA) == model.num_parameters()
    assert 1.26e9 < budget.n_params(BIG_LLAMA) < 1.28e9


# ---------------------------------------------------------------------------------------------
# the memory budget


def test_model_over_the_budget_is_refused_from_its_config_alone(tmp_path, monkeypatch, weight_reads):
    """No weights file at all: the refusal comes from config.json alone (no weight file is even looked
    for), and allocates nothing. How fast: tests/benchmarks/bench_refusals.py."""
    monkeypatch.setenv(settings.MEMORY_BUDGET_GB, "4")
    (tmp_path / "config.json").write_text(json.dumps(BIG_LLAMA))
    rss = _rss_bytes()
    msg = _refusal(tmp_path)
    assert "needs about 5.1 GB in float32; this server allows 4.0 GB" in msg, msg
    assert "1.27 B parameters" in msg
    assert weight_reads == []
    assert _rss_bytes() - rss < 5e8


def test_budget_setting_and_default(monkeypatch):
    monkeypatch.setenv(settings.MEMORY_BUDGET_GB, "2.5")
    assert budget.budget_bytes() == 2_500_000_000
    monkeypatch.setenv(settings.MEMORY_BUDGET_GB, "lots")  # not a number: the default, not a crash
    assert budget.budget_bytes() == budget.default_budget_bytes()
    monkeypatch.delenv(settings.MEMORY_BUDGET_GB)
    default = budget.budget_bytes()
    assert default >= budget.weight_bytes(134_515_008)  # the embedded model always fits
    mem = budget.machine_memory()
    assert mem is None or default == max(int(0.4 * mem), int(budget.BUDGET_FLOOR))


def test_tiny_model_under_a_small_budget_still_loads(tiny_dirs, monkeypatch):
    monkeypatch.setenv(settings.MEMORY_BUDGET_GB, "0.05")  # 50 MB: the tiny mistral (3.2 M parameters) needs about 13 MB
    loaded = load_model(str(tiny_dirs["mistral"]))
    assert budget.weight_bytes(loaded.model.num_parameters()) < 50e6


# ---------------------------------------------------------------------------------------------
# no answer tells whether a path exists


def test_not_a_model_folder_reads_the_same_whatever_the_cause(tmp_path):
    (tmp_path / "a-file.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    home = os.path.expanduser("~")
    specs = [
        tmp_path / "does-not-exist",  # no such path
        tmp_path / "a-file.json",  # a file
        tmp_path / "empty",  # a folder without config.json
        "~",  # the server account's home folder: exists, no config.json
        "~/surely-not-here-xray",
        "someone/not-in-the-cache",
    ]
    messages = {_refusal(s) for s in specs}
    assert len(messages) == 1, messages
    msg = messages.pop()
    assert home not in msg and str(tmp_path) not in msg and "No folder" in msg
