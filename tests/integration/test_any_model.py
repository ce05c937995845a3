"""Any model the operator offers, honestly (issue 30): a prompt is cut at the model's own positions, not
only at the app's 4,096-token limit, wherever it enters (trace, generation, the pairs, the command line,
the pages), and said so; a chat-templated prompt keeps the template's end when cut (issue 29 item 9)."""

from __future__ import annotations

import json

import floats
import numpy as np
import pytest

from conftest import ROOT, _smol_tokenizer
from core import backends
from core.common import settings
from core.common.i18n import t
from core.gen import generate

LONG = "The quick brown fox jumps over the lazy dog. " * 40  # ~400 tokens


@pytest.mark.parametrize("stem", ["residual", "generation", "tokens", "journey", "heads"])
def test_pages_say_the_model_cut_the_prompt(short_gpt2, monkeypatch, stem):
    """The page view that failed with "The forward pass failed: IndexError": now the notice, in the reader's language."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("XRAY_MODELS", f"gpt2-64={short_gpt2}")
    for lang, sentence in (("en", "this model has only 64 positions"), ("zh", "这个模型只有 64 个位置")):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
        at.query_params["model"] = "gpt2-64"
        at.session_state["lang"] = lang
        at.session_state["prompt"] = LONG
        at.switch_page(f"pages/{stem}.py")
        at.run()
        assert not at.exception and not at.error, (stem, at.exception, [e.value for e in at.error])
        assert any(sentence in w.value for w in at.warning), [w.value for w in at.warning]


# ---------------------------------------------------------------------------------------------
# every sentence about a model from that model's own facts (issue 30 item 2)

FAMILIES = ("llama_gqa_untied", "qwen2_mha_tied_bias", "mistral_mqa", "gpt2_learned")


def _family_config(name: str, vocab: int):
    from transformers import GPT2Config, LlamaConfig, MistralConfig, Qwen2Config

    if name == "llama_gqa_untied":
        return LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                           vocab_size=vocab, max_position_embeddings=256, tie_word_embeddings=False, architectures=["LlamaForCausalLM"])
    if name == "qwen2_mha_tied_bias":  # Qwen2's q/k/v projections carry biases
        return Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                           vocab_size=vocab, max_position_embeddings=256, tie_word_embeddings=True, architectures=["Qwen2ForCausalLM"])
    if name == "mistral_mqa":
        return MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                             vocab_size=vocab, max_position_embeddings=256, sliding_window=None, tie_word_embeddings=False,
                             architectures=["MistralForCausalLM"])
    return GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=256, vocab_size=vocab, bos_token_id=1, eos_token_id=2,
                      architectures=["GPT2LMHeadModel"])


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    """{name: (folder, config as saved)} for the four tiny families the issue tried."""
    import torch
    from transformers import AutoModelForCausalLM

    tok, out = _smol_tokenizer(), {}
    for name in FAMILIES:
        folder = tmp_path_factory.mktemp(name)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(_family_config(name, len(tok)))
        model.save_pretrained(str(folder), safe_serialization=True)
        tok.save_pretrained(str(folder))
        out[name] = (folder, json.loads((folder / "config.json").read_text()))
    return out


def _cfg(c: dict, *names: str):
    return next(c[n] for n in names if n in c)


def _facts_of(c: dict) -> dict:
    """The numbers the sentences must carry, read off config.json itself (not through the app's reader)."""
    H = _cfg(c, "num_attention_heads", "n_head")
    d = _cfg(c, "hidden_size", "n_embd")
    return {"L": _cfg(c, "num_hidden_layers", "n_layer"), "H": H, "Hkv": c.get("num_key_value_heads", H), "d": d, "dh": d // H,
            "V": c["vocab_size"], "tied": c.get("tie_word_embeddings", True), "gpt2": c["model_type"] == "gpt2"}


def _page(folder, stem: str, lang: str):
    import os

    from streamlit.testing.v1 import AppTest

    os.environ["XRAY_MODELS"] = f"fam={folder}"
    settings.reload()
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
        at.query_params["model"] = "fam"
        at.session_state["lang"] = lang
        at.switch_page(f"pages/{stem}.py")
        at.run()
    finally:
        os.environ.pop("XRAY_MODELS", None)
        settings.reload()
    assert not at.exception and not at.error, (stem, at.exception, [e.value for e in at.error])
    return at


def _texts(at) -> list[str]:
    return [e.value for kind in ("markdown", "caption", "success", "warning", "info") for e in getattr(at, kind)]


@pytest.mark.parametrize("fam", FAMILIES)
def test_sentences_about_the_model_come_from_its_config(families, fam):
    folder, c = families[fam]
    f = _facts_of(c)
    lang = "zh" if fam in ("qwen2_mha_tied_bias", "gpt2_learned") else "en"
    kind = "mha" if f["Hkv"] == f["H"] else "mqa" if f["Hkv"] == 1 else "gqa"

    # the heads page: MHA / MQA / GQA worded from n_heads and n_kv_heads, never SmolLM2's 9 and 3
    texts = _texts(_page(folder, "heads", lang))
    want = t(f"heads.share_{kind}", lang, H=f["H"], Hkv=f["Hkv"], g=f["H"] // f["Hkv"])
    assert want in texts, (want, texts)
    assert not any("SmolLM2" in s or "9 query heads" in s or "9 个 Query" in s for s in texts)
    if kind != "gqa":
        assert not any("GQA" in s or "consecutive" in s or "相邻" in s for s in texts)

    # the journey: RoPE only where the model rotates; GPT-2's learned positions said as such
    texts = _texts(_page(folder, "journey", lang))
    pos = [s for s in texts if s.startswith(("Position information", "本模型的位置信息"))]
    assert len(pos) == 1
    if f["gpt2"]:
        assert "RoPE" not in pos[0] and ("learned positions" in pos[0] or "可学习的位置向量" in pos[0])
    else:
        assert "RoPE" in pos[0]

    # the context page: "no position vector is added (RoPE …)" only where none is added
    texts = _texts(_page(folder, "context", lang))
    explain = t("context.explain_added", lang, pos=t("context.pos_learned", lang)) if f["gpt2"] else t("context.explain", lang)
    assert explain in texts
    assert f["gpt2"] is not any("RoPE" in s for s in texts)

    # anatomy: a tied head "adds nothing" only when tied; an untied head is counted with its own size
    at = _page(folder, "anatomy", lang)
    ok = " ".join(e.value for e in at.success)
    if f["tied"]:
        assert "adds nothing" in ok or "不另计" in ok
    else:
        lm = f"{f['V'] * f['d']:,}"  # the head's [V, d] matrix, no bias
        assert lm in ok and ("untied" in ok or "未与 Embedding 共享" in ok) and "adds nothing" not in ok and "不另计" not in ok

    # the KV calculator sizes the current model by default, from its own shape
    at = _page(folder, "kv_cache", lang)
    assert at.selectbox(key="kv_cache_preset").value == t("kv_cache.current", lang, name=folder.name)
    src = t("kv_cache.current_source", lang, L=f["L"], H=f["H"], Hkv=f["Hkv"], dh=f["dh"])
    assert src in [e.value for e in at.caption]
    total = 2 * f["L"] * f["Hkv"] * f["dh"] * 4 * 4096  # float32 values (the lesson's one default), 4,096 tokens, one request
    assert f"{total:,} B" in [e.value for e in at.caption]


# ---------------------------------------------------------------------------------------------
# the stepper's "This run: TTFT" is the prefill alone (issue 30 item 3)


def test_first_prefill_of_a_shape_is_warmed_up_untimed_once(short_gpt2, monkeypatch):
    """A fresh session's TTFT read 1.11 s where the prefill takes 84 ms: the first pass of a new prompt length
    pays one-off costs. The rule: before a Stepper's first prefill, one untimed pass of the same length runs,
    once per process (model, length, recording); the TTFT shown is the timed prefill's own record."""
    from streamlit.testing.v1 import AppTest

    from core.web import generation as gen_ui

    gen_ui._warmed.clear()
    passes: list[tuple[str, int]] = []
    real_forward, real_warm = backends.forward_step, generate.warm_prefill

    def forward(loaded, ids, cache=None, **kw):
        passes.append(("pass", len(ids)))
        return real_forward(loaded, ids, cache, **kw)

    def warm(loaded, ids, record_attention=False):
        passes.append(("warm", len(ids)))
        real_warm(loaded, ids, record_attention)

    monkeypatch.setattr(backends, "forward_step", forward)
    monkeypatch.setattr(generate, "warm_prefill", warm)
    monkeypatch.setenv("XRAY_MODELS", f"gpt2-64={short_gpt2}")
    prompt = "The quick brown fox jumps over the lazy dog."

    def fresh_session_prefill():
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
        at.query_params["model"] = "gpt2-64"
        at.session_state["prompt"] = prompt
        at.switch_page("pages/generation.py")
        at.run()
        passes.clear()
        at.button(key="generation_prefill").click().run()
        assert not at.exception and not at.error
        return at

    at = fresh_session_prefill()
    stp = at.session_state[gen_ui.KEY]
    n = len(stp.prompt_ids)  # the page's prompt (chat template on by default)
    assert passes[:3] == [("warm", n), ("pass", n), ("pass", n)]  # the untimed pass of this shape, then the timed prefill
    assert len(stp.records) == 1 and stp.ttft == stp.records[0].seconds  # TTFT: the prefill's own record, nothing else
    fresh_session_prefill()  # another fresh session, same shape: already warm in this process
    assert ("warm", n) not in passes and passes[0] == ("pass", n)


def test_wheel_ships_the_assets_and_an_install_finds_them(tmp_path):
    """`pip install .` left assets/ out (the toy failed with the raw key load.err_toy_broken, the KV presets with
    FileNotFoundError). The wheel now holds every file of assets/ as core/assets/, and core, unpacked alone as
    site-packages holds it (no checkout beside it), finds its strings, presets, workloads and the toy there."""
    import shutil
    import subprocess
    import sys
    import zipfile

    import core

    src = tmp_path / "src"  # a copy: building in the checkout would leave build/ and *.egg-info behind
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("core", "assets"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "wheel"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out)],
                       cwd=src, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (whl,) = out.glob("*.whl")
    assert whl.name.startswith(f"transformer_xray-{core.__version__}-")
    names = set(zipfile.ZipFile(whl).namelist())
    want = {"core/assets/" + f.relative_to(ROOT / "assets").as_posix() for f in (ROOT / "assets").rglob("*") if f.is_file()}
    assert want <= names, sorted(want - names)
    assert "core/assets/i18n/common.json" in names and "core/assets/toy/toy.safetensors" in names
    assert not any(n.startswith(("assets/", "tests/", "pages/")) for n in names)
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    code = ("import core, core.common.paths as p, core.common.i18n as i, core.gen.kvcalc as kv, core.gen.workloads as w;"
            "from core.learn import long_docs;"
            "print(p.assets_dir()); print(i.t('warn.truncated_model', 'zh', n=9, k=8)); print(len(kv.load_presets()));"
            "m = core.load_model('toy'); print(m.facts.name); print(core.__version__)")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert lines[0] == str(site / "core" / "assets")  # the installed package's own copy, not the checkout's
    assert "这个模型只有 8 个位置" in lines[1] and int(lines[2]) >= 5 and lines[-1] == core.__version__


def test_logit_lens_top_k_with_probabilities(tiny_loaded, eager_refs):
    """The lens gives the k best tokens with their probabilities; k=1 is the page's top-1 exactly; the last row
    is the model's own prediction (HF eager's logits, an independent route)."""
    import torch

    import core
    from core.stream import lens as lens_mod

    m = tiny_loaded["llama"]
    tr = core.trace(m, "The capital of France is Paris, and the capital of Italy is")
    lz = core.logit_lens(m, tr, k=4)
    L1, T = tr.n_layers + 1, tr.n_tokens
    assert lz.ids.shape == lz.probs.shape == lz.tokens.shape == (L1, T, 4) and lz.lo == 0
    assert (np.diff(lz.probs, axis=-1) <= 0).all() and (lz.probs > 0).all() and (lz.probs.sum(-1) <= 1 + 1e-5).all()
    ids1, probs1 = lens_mod.logit_lens(m, tr)  # the Residual page's figure
    np.testing.assert_array_equal(lz.ids[..., 0], ids1)
    np.testing.assert_array_equal(lz.probs[..., 0], probs1)
    with torch.inference_mode():
        ref = torch.softmax(eager_refs["llama"].run(tr.token_ids).logits[0].double(), -1)  # [T, V], HF eager float32
        ref64 = torch.softmax(eager_refs["llama"].run(tr.token_ids, dtype="float64").logits[0], -1)  # the exact answer
    top = torch.topk(ref, 4, dim=-1)
    np.testing.assert_array_equal(lz.ids[-1], top.indices.numpy())
    # two float32 routes (ours and HF eager's) to the same probabilities: ours as accurate as HF's own route
    exact = torch.gather(ref64, -1, top.indices).numpy()
    floats.assert_as_accurate(lz.probs[-1], top.values.numpy(), exact, what="the lens' last row (the model's prediction)")
    rows = lz.at(T - 1)
    assert len(rows) == L1 and len(rows[-1]) == 4 and rows[-1][0][1] == pytest.approx(float(lz.probs[-1, -1, 0]))
    win = core.logit_lens(m, tr, k=2, lo=3, hi=6)
    assert win.ids.shape == (L1, 3, 2) and win.lo == 3
    np.testing.assert_array_equal(win.ids, lz.ids[:, 3:6, :2])
    with pytest.raises(IndexError):
        win.at(0)
    nt = core.next_tokens(m, tr, [T - 1])
    assert nt.ids[0, 0] == lz.ids[-1, -1, 0]  # the lens' last row and next_tokens agree on the best token
