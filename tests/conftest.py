"""Shared fixtures: the embedded SmolLM2 (loaded once), and tiny random HF models built from
configs (saved as local folders, so they go through the same loader as a user's model)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("XRAY_MEASURES_PER_MIN", "100000")  # the suite measures more a minute than a class may (tests/unit/test_work_kept.py checks the cap)

TINY_ARCHS = ("llama", "qwen2", "mistral", "gpt2")


@pytest.fixture(scope="session")
def smol():
    """The embedded SmolLM2-135M-Instruct, shared by the whole session (read-only!)."""
    return _smol()


@functools.cache
def _smol():
    """Loaded once per test session, whoever asks first (a fixture, a tiny model's tokenizer)."""
    from core.backends import load_model

    return load_model(None)


@functools.cache
def _smol_folder() -> Path:
    """The converted embedded model's folder (config, safetensors, tokenizer)."""
    from core.engine.hf import converted_dir, embedded_gguf_path

    _smol()  # converts the GGUF file on a fresh machine
    return converted_dir(embedded_gguf_path())


@functools.cache
def _smol_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(_smol_folder()))


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
    from transformers import AutoModelForCausalLM

    tok = _smol_tokenizer()
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


class EagerReference:
    """HF's own model, loaded apart from the app's (no xray), with eager attention, in float32 and in
    float64: the independent reference, and (float64) the exact answer to float32's eyes, so that a
    comparison of two routes can be bounded by float32's own error on that input (``floats.assert_as_accurate``)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._models: dict = {}

    def model(self, dtype: str = "float32"):
        import torch
        from transformers import AutoModelForCausalLM

        if dtype not in self._models:
            m = AutoModelForCausalLM.from_pretrained(str(self.folder), attn_implementation="eager", dtype=getattr(torch, dtype))
            self._models[dtype] = m.eval()
        return self._models[dtype]

    def run(self, ids, dtype: str = "float32", **kw):
        """One forward of ``ids`` ([T] ints) with ``kw`` (output_attentions=True, …), batch dimension kept."""
        import torch

        with torch.inference_mode():
            return self.model(dtype)(torch.tensor([list(map(int, ids))]), **kw)


@pytest.fixture(scope="session")
def eager_refs(tiny_dirs):
    """{name: EagerReference} for every tiny architecture and "smollm2" (the embedded model's folder)."""
    refs = {a: EagerReference(d) for a, d in tiny_dirs.items()}
    refs["smollm2"] = EagerReference(_smol_folder())
    return refs


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
def _settings_read_per_test(monkeypatch):
    """The XRAY_* settings are read once per process (core.common.settings). Here they are read again for each
    test, and after each ``monkeypatch.setenv`` / ``delenv`` of the test and its fixtures, so that a variable a test
    sets is what it runs with; a test that writes ``os.environ`` itself calls ``settings.reload()``."""
    from core.common import settings

    def then_reload(change):
        def changed(*a, **kw):
            change(*a, **kw)
            settings.reload()
        return changed

    for name in ("setenv", "delenv"):
        setattr(monkeypatch, name, then_reload(getattr(monkeypatch, name)))
    settings.reload()
    yield
    settings.reload()


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


# ---------------------------------------------------------------------------------------------
# Tiers: the folder is the tier (tests/unit, tests/integration, tests/browser; markers registered in
# pyproject.toml, so ``-m unit`` still selects one). ``make test-fast`` runs tests/unit, ``make test`` all of them;
# tests/unit/test_tiers.py checks that a unit file touches no embedded model, AppTest or browser.
TIERS = ("unit", "integration", "browser")


def tier_of(path: Path) -> str:
    """The tier of a test file: the folder under tests/ it lives in."""
    folder = path.resolve().relative_to(ROOT / "tests").parts[0]
    if folder not in TIERS:
        raise pytest.UsageError(f"{path}: a test file lives in tests/unit, tests/integration or tests/browser (the folder is its tier)")
    return folder


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item.path)))


# ---------------------------------------------------------------------------------------------
# Fixtures that a test file's tiers share (the tests of one subject, split by tier into two folders)


@pytest.fixture(scope="module")
def toy():
    """The trained toy transformer (core.toy)."""
    from core.toy import load_trained

    return load_trained()


@pytest.fixture(scope="module")
def toy_twins(toy):
    """The toy's untouched copies in float32 and float64 (see ``_twins``)."""
    from helpers.cause import _twins

    return _twins(toy)


@pytest.fixture(scope="module")
def short_gpt2(tmp_path_factory):
    """A tiny random GPT-2 with only 64 learned positions (SmolLM2's tokenizer), saved as safetensors."""
    import torch
    from helpers.any_model import N_POS
    from transformers import AutoModelForCausalLM, GPT2Config

    tok = _smol_tokenizer()
    folder = tmp_path_factory.mktemp("gpt2_64")
    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=N_POS, vocab_size=len(tok), bos_token_id=1, eos_token_id=2,
                     architectures=["GPT2LMHeadModel"])
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(folder), safe_serialization=True)
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture
def short_bound(monkeypatch):
    """A trace keeps no keys and values above 8 tokens (``hf_trace.KV_KEEP_MAX``): a short prompt takes the long ones' route."""
    from core.engine import hf_trace

    monkeypatch.setattr(hf_trace, "KV_KEEP_MAX", 8)


@pytest.fixture
def fake_embedded(tmp_path, monkeypatch, tiny_dirs):
    """The embedded model's loader on a temporary cache folder (XRAY_CACHE_DIR), with a tiny Llama in place
    of the GGUF's 15-second conversion: every conversion copies its files and is counted."""
    import shutil

    from core.engine import hf

    cache = tmp_path / "cache"
    monkeypatch.setenv("XRAY_CACHE_DIR", str(cache))
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(hf, "embedded_gguf_path", lambda: gguf)
    made: list[Path] = []

    def dequantise(_gguf, tmp, *_progress):
        made.append(tmp)
        for f in tiny_dirs["llama"].iterdir():
            if f.is_file():
                shutil.copy(f, tmp / f.name)

    monkeypatch.setattr(hf, "_dequantise", dequantise)
    monkeypatch.setattr(hf, "_VERIFIED", set())  # a fresh process: nothing hashed yet
    return hf, hf.converted_dir(gguf), made


@pytest.fixture
def forward_count(monkeypatch):
    """How many real forward passes ran (each cache miss of a trace is one)."""
    from core import backends

    calls = {"n": 0}
    real = backends.trace_ids

    def counting(*a, **kw):
        calls["n"] += 1
        return real(*a, **kw)

    monkeypatch.setattr(backends, "trace_ids", counting)
    return calls


def plotly_array(v):
    """An array from a plotly figure spec as the browser gets it: nested lists, or a typed array
    {dtype, bdata (base64)[, shape]}."""
    import base64

    import numpy as np

    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).astype(float)
        shape = v.get("shape")
        if shape:
            a = a.reshape([int(s) for s in str(shape).split(",")] if isinstance(shape, str) else shape)
        return a
    if isinstance(v, list) and v and isinstance(v[0], (list, dict)):
        return np.stack([plotly_array(row) for row in v])
    return np.asarray(v, dtype=float)


def title_of(spec: dict) -> str:
    """A drawn figure's title: presenter.chart draws it as text above the figure and keeps it in the
    spec as ``layout.meta.title`` (a figure built but not drawn still has ``layout.title``)."""
    layout = spec["layout"]
    return (layout.get("meta") or {}).get("title") or layout.get("title", {}).get("text") or ""


def figure_spec(at, title_part: str) -> dict:
    """The spec (as JSON) of the first plotly chart an AppTest run drew whose spec mentions ``title_part``."""
    import json

    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        if title_part in json.dumps(spec, ensure_ascii=False):
            return spec
    raise AssertionError(f"no figure mentions {title_part!r}")


@pytest.fixture
def fake_timing(monkeypatch):
    """The attention lab's cost tab with a stand-in live SDPA timing (ms = n at the lengths asked, a result of
    the right shape), so a page test does not time attention up to 8K on a shared machine; the shared
    measurement is dropped before and after."""
    import numpy as np

    from core.maths import attention as A
    from core.web import cache

    def fake(lengths):
        n = np.asarray(lengths, dtype=float)
        return {"n": n, "ms": n, "q1": n, "q3": n, "min": n, "max": n, "elements": n**2, "reps": 1, "timings": [],
                "busy": False, "n_busy": 0}

    monkeypatch.setattr(A, "time_attention", fake)
    cache.attention_timing.clear()
    yield
    cache.attention_timing.clear()
