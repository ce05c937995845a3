"""Shared fixtures: the embedded SmolLM2 (loaded once), and tiny random HF models built from
configs (saved as local folders, so they go through the same loader as a user's model)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TINY_ARCHS = ("llama", "qwen2", "mistral", "gpt2")


@pytest.fixture(scope="session")
def smol():
    """The embedded SmolLM2-135M-Instruct, shared by the whole session (read-only!)."""
    from core.backends import load_model

    return load_model(None)


def _tiny_config(arch: str, vocab: int):
    from transformers import GPT2Config, LlamaConfig, MistralConfig, Qwen2Config

    common = dict(vocab_size=vocab, max_position_embeddings=256, tie_word_embeddings=False)
    if arch == "llama":
        return LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=6,
                           num_key_value_heads=2, rope_theta=10000.0, architectures=["LlamaForCausalLM"], **common)
    if arch == "qwen2":
        return Qwen2Config(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, architectures=["Qwen2ForCausalLM"], **common)
    if arch == "mistral":
        return MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=1, sliding_window=None, architectures=["MistralForCausalLM"], **common)
    if arch == "gpt2":
        return GPT2Config(n_embd=48, n_layer=2, n_head=4, n_positions=256, vocab_size=vocab, bos_token_id=1, eos_token_id=2,
                          architectures=["GPT2LMHeadModel"])
    raise ValueError(arch)


def build_tiny(arch: str, folder: Path, seed: int = 0) -> Path:
    """A tiny random model of ``arch`` with SmolLM2's tokenizer, saved as safetensors in ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.backends import load_model
    from core.engine.hf import converted_dir, embedded_gguf_path

    load_model(None)  # make sure the converted tokenizer exists
    tok = AutoTokenizer.from_pretrained(str(converted_dir(embedded_gguf_path())))
    torch.manual_seed(seed)
    cfg = _tiny_config(arch, len(tok))
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():  # bigger random weights than init, so attention is not uniform
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.15)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """{arch: folder} for every tiny architecture."""
    base = tmp_path_factory.mktemp("tiny")
    return {a: build_tiny(a, base / a) for a in TINY_ARCHS}


@pytest.fixture(scope="session")
def tiny_loaded(tiny_dirs):
    """{arch: LoadedModel} loaded through core.backends.load_model."""
    from core.backends import load_model

    return {a: load_model(str(d)) for a, d in tiny_dirs.items()}


def app_run(stem: str | None = None, /, **query: str):
    """The app (router and sidebar included) run once by AppTest, as a shared link opens it: on the page
    ``stem`` (pages/<stem>.py; the default page without one), with ``query`` as the URL's query parameters."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    for k, v in query.items():
        at.query_params[k] = v
    if stem is not None:
        at.switch_page(f"pages/{stem}.py")
    return at.run()


def all_text(at) -> str:
    """Everything an AppTest run sent to the browser (every element's protobuf, main area and sidebar)."""
    return "\n".join(str(getattr(node, "proto", "")) for node in at._tree)


@pytest.fixture(autouse=True)
def _navigation_pages_only(monkeypatch):
    """AppTest resets Streamlit's old 'pages/ folder = automatic multipage app' flag before every
    run, so from the second run on it would execute a page script alone, without app.py's router
    and sidebar. Our pages/ are st.navigation pages (core.web.server does the same for the server)."""
    from streamlit.runtime.pages_manager import PagesManager

    original = PagesManager.__init__

    def init(self, *a, **kw):
        PagesManager.uses_pages_directory = False
        original(self, *a, **kw)

    monkeypatch.setattr(PagesManager, "__init__", init)
