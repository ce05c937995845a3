"""The trace contract, checked against independent references: HF's own eager model (loaded
separately, no xray), its KV cache and hidden states, and hand recomputation from traced q/k."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from conftest import ROOT, TINY_ARCHS
from core import backends
from core.engine import xray
from core.engine.trace import load_npz
from core.engine.types import EmptyPromptError, UnsupportedArchitectureError

PROMPT = "The quick brown fox jumps over the lazy dog, and 苹果很好吃。"


def _eager_reference(folder):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32)
    return m.eval()


@pytest.fixture(scope="module")
def cases(tiny_loaded, tiny_dirs, smol):
    """(name, loaded, trace, HF eager outputs of an independent model instance)."""
    from core.engine.hf import converted_dir, embedded_gguf_path

    out = []
    folders = dict(tiny_dirs)
    folders["smollm2"] = converted_dir(embedded_gguf_path())
    loadeds = dict(tiny_loaded)
    loadeds["smollm2"] = smol
    for name in (*TINY_ARCHS, "smollm2"):
        loaded = loadeds[name]
        tr = backends.trace(loaded, PROMPT)
        ref = _eager_reference(folders[name])
        with torch.inference_mode():
            o = ref(torch.tensor(tr.token_ids)[None], output_hidden_states=True, output_attentions=True, use_cache=True)
        out.append((name, loaded, tr, o))
    return out


def test_shapes_follow_the_contract(cases):
    for name, loaded, tr, _ in cases:
        f = loaded.facts
        T, L, H, Hkv, dh, d = tr.n_tokens, f.n_layers, f.n_heads, f.n_kv_heads, f.head_dim, f.d_model
        assert tr.tokens.shape == tr.token_ids.shape == (T,), name
        assert tr.embeddings.shape == (T, d)
        assert tr.resid.shape == (L + 1, T, d)
        assert tr.attn_out.shape == tr.mlp_out.shape == (L, T, d)
        assert tr.q.shape == (L, H, T, dh)
        assert tr.k.shape == tr.v.shape == (L, Hkv, T, dh)
        assert tr.attn_pattern.shape == (L, H, T, T)
        assert tr.final_hidden.shape == (T, d)
        assert tr.last_logits.shape == (f.vocab_size,)


def test_tracing_changes_no_logit(cases):
    """The traced model's logits equal an untouched eager HF model's, at every position."""
    for name, loaded, tr, o in cases:
        ref = o.logits[0].numpy()
        torch.testing.assert_close(torch.from_numpy(backends.full_logits(loaded, tr)), torch.from_numpy(ref), rtol=1e-5, atol=1e-4, msg=name)
        np.testing.assert_allclose(tr.last_logits, ref[-1], rtol=1e-5, atol=1e-4, err_msg=name)
        # the stored top-K and log-sum-exp give exact probabilities at every position
        lse = torch.logsumexp(torch.from_numpy(ref), -1).numpy()
        np.testing.assert_allclose(tr.logsumexp, lse, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(tr.top_ids[:, 0], ref.argmax(-1))


def test_attention_equals_hf_eager_output_attentions(cases):
    for name, _, tr, o in cases:
        for layer, a in enumerate(o.attentions):
            np.testing.assert_allclose(tr.attn_pattern[layer].astype(np.float32), a[0].numpy(), atol=5e-4, err_msg=f"{name} L{layer}")


def test_attention_rows_sum_to_one_and_are_causal(cases):
    for name, _, tr, _ in cases:
        p = tr.attn_pattern.astype(np.float32)
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=3e-3, err_msg=name)
        T = tr.n_tokens
        assert np.all(p[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0), name


def test_attention_recomputed_from_traced_q_and_k(cases):
    """softmax(q·kᵀ/√dh + causal mask), query head h reading KV head h // (H/Hkv)."""
    for name, _loaded, tr, _ in cases:
        H, Hkv, dh, T = tr.n_heads, tr.n_kv_heads, tr.head_dim, tr.n_tokens
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for layer in range(tr.n_layers):
            for h in range(H):
                kv = h // (H // Hkv)
                s = tr.q[layer, h].astype(np.float64) @ tr.k[layer, kv].astype(np.float64).T / np.sqrt(dh) + mask
                w = np.exp(s - s.max(-1, keepdims=True))
                w /= w.sum(-1, keepdims=True)
                np.testing.assert_allclose(tr.attn_pattern[layer, h].astype(np.float64), w, atol=5e-4, err_msg=f"{name} L{layer} H{h}")


def test_k_v_equal_hf_kv_cache(cases):
    for name, _, tr, o in cases:
        cache = o.past_key_values
        for layer in range(tr.n_layers):
            np.testing.assert_allclose(tr.k[layer], cache.layers[layer].keys[0].numpy(), atol=1e-5, err_msg=name)
            np.testing.assert_allclose(tr.v[layer], cache.layers[layer].values[0].numpy(), atol=1e-5, err_msg=name)


def test_residual_stream_identity_and_hidden_states(cases):
    for name, _, tr, o in cases:
        np.testing.assert_allclose(tr.resid[1:], tr.resid[:-1] + tr.attn_out + tr.mlp_out, rtol=1e-5, atol=1e-4, err_msg=name)
        hs = o.hidden_states  # HF: embeddings(+positions), then each block's output …, the last one after the final norm
        for layer in range(tr.n_layers):
            np.testing.assert_allclose(tr.resid[layer], hs[layer][0].numpy(), atol=1e-5, err_msg=name)
        np.testing.assert_allclose(tr.final_hidden, hs[-1][0].numpy(), atol=1e-5, err_msg=name)


def test_embeddings_are_rows_of_the_embedding_matrix(cases):
    for name, loaded, tr, _ in cases:
        w = loaded.model.get_input_embeddings().weight.detach().numpy()
        np.testing.assert_array_equal(tr.embeddings, w[tr.token_ids], err_msg=name)


def test_logits_are_the_lm_head_of_final_hidden(cases):
    for name, loaded, tr, _ in cases:
        w = loaded.model.get_output_embeddings().weight.detach().numpy().astype(np.float64)
        np.testing.assert_allclose(tr.final_hidden[-1].astype(np.float64) @ w.T, tr.last_logits, rtol=1e-4, atol=1e-4, err_msg=name)


def _hook_state(model):
    return {name: (tuple(m._forward_hooks), tuple(m._forward_pre_hooks)) for name, m in model.named_modules()}


def test_no_hook_flag_or_record_is_left_on_the_model(cases):
    """Tracing leaves the shared model exactly as it found it (hooks transformers itself may have
    installed for output_hidden_states are its own, and stay the same)."""
    for name, loaded, _, _ in cases:
        before = _hook_state(loaded.model)
        config_before = loaded.model.config.to_json_string()
        backends.trace(loaded, "Another prompt, to trace once more.")
        assert _hook_state(loaded.model) == before, name
        assert loaded.model.config.to_json_string() == config_before
        assert loaded.model.config._attn_implementation == xray.NAME
    assert getattr(xray._local, "record", None) is None


def test_eight_threads_each_get_their_own_trace(smol):
    prompts = [f"Prompt number {i}: {w}" for i, w in enumerate(
        ["apples", "苹果很好吃。", "the capital of France", "成都今天适合跑步吗", "小明把书交给小红", "KV cache", "RoPE rotates", "🙂 emoji"])]
    alone = {p: backends.trace(smol, p) for p in prompts}
    together: dict[str, object] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(prompts))

    def work(p):
        try:
            barrier.wait()
            together[p] = backends.trace(smol, p)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for p in prompts:
        a, b = alone[p], together[p]
        for key in ("token_ids", "resid", "q", "k", "v", "attn_pattern", "last_logits"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=f"{p}: {key}")


def _save_tiny(cfg, cls, folder):
    from transformers import AutoTokenizer

    from core.engine.hf import converted_dir, embedded_gguf_path

    tok = AutoTokenizer.from_pretrained(str(converted_dir(embedded_gguf_path())))
    torch.manual_seed(0)
    cls(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


def test_unsupported_architectures_are_refused_with_a_reason(tmp_path):
    """Gemma-2 normalises each branch before adding it (resid[l+1] ≠ resid[l] + attn + mlp), and
    OPT's blocks have no mlp sub-module: both are refused, naming why, never drawn wrongly."""
    from transformers import Gemma2Config, Gemma2ForCausalLM, OPTConfig, OPTForCausalLM

    from core.backends import load_model

    g = Gemma2Config(vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, architectures=["Gemma2ForCausalLM"])
    loaded = load_model(str(_save_tiny(g, Gemma2ForCausalLM, tmp_path / "gemma2")))
    with pytest.raises(UnsupportedArchitectureError, match="not pre-norm residual"):
        backends.trace(loaded, "hello world")
    o = OPTConfig(vocab_size=49152, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
                  word_embed_proj_dim=32, architectures=["OPTForCausalLM"])
    loaded = load_model(str(_save_tiny(o, OPTForCausalLM, tmp_path / "opt")))
    with pytest.raises(UnsupportedArchitectureError, match=r"no attention .* or MLP"):
        backends.trace(loaded, "hello world")
    for mod in loaded.model.modules():  # a refused trace leaves nothing behind either
        assert not mod._forward_hooks and not mod._forward_pre_hooks


def test_empty_prompt_and_truncation(smol):
    with pytest.raises(EmptyPromptError):
        backends.trace(smol, "   \n ")
    tr = backends.trace(smol, "word " * 700, max_tokens=64)
    assert tr.n_tokens == 64 and tr.truncated_from and tr.truncated_from > 64
    assert any("64" in n for n in tr.notes)


def test_chat_template_tokens(smol):
    tr = backends.trace(smol, "What is the capital of France?", chat=True)
    assert "<|im_start|>" in list(tr.tokens) and tr.text.endswith("<|im_start|>assistant\n")
    assert smol.tokenizer.decode(int(tr.top_ids[-1, 0])).strip() == "The"


def test_export_npz_has_exactly_the_contract_keys(smol, tmp_path):
    tr = backends.trace(smol, "Paris is the capital of")
    p = tmp_path / "t.npz"
    backends.export_npz(smol, tr, p)
    z = load_npz(p)
    assert set(z) == {"tokens", "token_ids", "embeddings", "resid", "attn_out", "mlp_out", "q", "k", "v",
                      "attn_pattern", "final_hidden", "logits", "meta"}
    assert z["logits"].shape == (tr.n_tokens, 49152)
    assert list(z["tokens"]) == list(tr.tokens)
    assert z["meta"]["facts"]["n_layers"] == 30 and z["meta"]["logits_positions"] == "all"
    np.testing.assert_array_equal(z["q"], tr.q)


def test_cli_trace_writes_the_npz(tmp_path):
    out = tmp_path / "cli.npz"
    r = subprocess.run([sys.executable, "-m", "core", "trace", "Hello world", "-o", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    z = np.load(out)
    assert z["resid"].shape[0] == 31 and json.loads(str(z["meta"]))["prompt"] == "Hello world"
    r = subprocess.run([sys.executable, "-m", "core", "trace", "", "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "empty" in r.stderr


def test_trace_memory_budget(smol):
    """A 256-token SmolLM2 trace stays within 128 MB (see the storage notes in core/trace.py)."""
    ids = (smol.tokenizer("The history of the transformer architecture begins in 2017. " * 40)["input_ids"])[:256]
    tr = backends.trace_ids(smol, ids)
    assert tr.n_tokens == 256
    assert tr.nbytes < 128e6, tr.nbytes
