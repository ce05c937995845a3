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
        out.append((name, loaded, tr, o, backends.stacked_layers(loaded, tr, with_pattern=True)))
    return out


def test_shapes_follow_the_contract(cases):
    for name, loaded, tr, _, lay in cases:
        f = loaded.facts
        T, L, H, Hkv, dh, d = tr.n_tokens, f.n_layers, f.n_heads, f.n_kv_heads, f.head_dim, f.d_model
        assert tr.tokens.shape == tr.token_ids.shape == (T,), name
        assert tr.embeddings.shape == (T, d)
        assert tr.resid.shape == (L + 1, T, d)
        assert tr.attn_out_norm.shape == tr.mlp_out_norm.shape == (L, T)
        assert (tr.n_heads, tr.n_kv_heads, tr.head_dim) == (H, Hkv, dh)
        # derived per layer on demand, never stored by an HF trace
        assert tr.q is tr.attn_pattern is tr.attn_out is None
        assert lay["attn_out"].shape == lay["mlp_out"].shape == (L, T, d)
        assert lay["q"].shape == (L, H, T, dh)
        assert lay["k"].shape == lay["v"].shape == (L, Hkv, T, dh)
        assert lay["attn_pattern"].shape == (L, H, T, T)
        assert tr.final_hidden.shape == (T, d)
        assert tr.last_logits.shape == (f.vocab_size,)


def test_tracing_changes_no_logit(cases):
    """The traced model's logits equal an untouched eager HF model's, at every position."""
    for name, loaded, tr, o, _ in cases:
        ref = o.logits[0].numpy()
        torch.testing.assert_close(torch.from_numpy(backends.full_logits(loaded, tr)), torch.from_numpy(ref), rtol=1e-5, atol=1e-4, msg=name)
        np.testing.assert_allclose(tr.last_logits, ref[-1], rtol=1e-5, atol=1e-4, err_msg=name)
        # the stored top-K and log-sum-exp give exact probabilities at every position
        lse = torch.logsumexp(torch.from_numpy(ref), -1).numpy()
        nt = backends.next_tokens(loaded, tr)
        np.testing.assert_allclose(nt.logsumexp, lse, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(nt.ids[:, 0], ref.argmax(-1))


def test_attention_equals_hf_eager_output_attentions(cases):
    for name, _, _tr, o, lay in cases:
        for layer, a in enumerate(o.attentions):
            np.testing.assert_allclose(lay["attn_pattern"][layer].astype(np.float32), a[0].numpy(), atol=5e-4, err_msg=f"{name} L{layer}")


def test_attention_rows_sum_to_one_and_are_causal(cases):
    for name, _, tr, _, lay in cases:
        p = lay["attn_pattern"].astype(np.float32)
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=3e-3, err_msg=name)
        T = tr.n_tokens
        assert np.all(p[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0), name


def test_attention_recomputed_from_traced_q_and_k(cases):
    """softmax(q·kᵀ/√dh + causal mask), query head h reading KV head h // (H/Hkv)."""
    for name, _loaded, tr, _, lay in cases:
        H, Hkv, dh, T = tr.n_heads, tr.n_kv_heads, tr.head_dim, tr.n_tokens
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for layer in range(tr.n_layers):
            for h in range(H):
                kv = h // (H // Hkv)
                s = lay["q"][layer, h].astype(np.float64) @ lay["k"][layer, kv].astype(np.float64).T / np.sqrt(dh) + mask
                w = np.exp(s - s.max(-1, keepdims=True))
                w /= w.sum(-1, keepdims=True)
                np.testing.assert_allclose(lay["attn_pattern"][layer, h].astype(np.float64), w, atol=5e-4, err_msg=f"{name} L{layer} H{h}")


def test_k_v_equal_hf_kv_cache(cases):
    for name, _, tr, o, lay in cases:
        cache = o.past_key_values
        for layer in range(tr.n_layers):
            np.testing.assert_allclose(lay["k"][layer], cache.layers[layer].keys[0].numpy(), rtol=1e-5, atol=2e-5, err_msg=name)
            np.testing.assert_allclose(lay["v"][layer], cache.layers[layer].values[0].numpy(), rtol=1e-5, atol=2e-5, err_msg=name)


def test_residual_stream_identity_and_hidden_states(cases):
    """The forward pass runs SDPA, HF's reference eager: the two kernels round differently in the last
    float32 bits, which the stream carries along (hence a tolerance relative to its magnitude)."""
    for name, _, tr, o, lay in cases:
        np.testing.assert_allclose(tr.resid[1:], tr.resid[:-1] + lay["attn_out"] + lay["mlp_out"], rtol=1e-5, atol=1e-3, err_msg=name)
        np.testing.assert_allclose(tr.attn_out_norm, np.linalg.norm(lay["attn_out"], axis=-1), rtol=1e-4, atol=1e-4, err_msg=name)
        # a derived layer's mlp_out is the rest of the block's step once the (eager) attention is taken
        # out: it carries the SDPA-vs-eager rounding of the attention, small against the stream's scale
        stream = max(1.0, float(np.abs(tr.resid).max()))
        np.testing.assert_allclose(tr.mlp_out_norm, np.linalg.norm(lay["mlp_out"], axis=-1), rtol=1e-4, atol=2e-5 * stream, err_msg=name)
        hs = o.hidden_states  # HF: embeddings(+positions), then each block's output …, the last one after the final norm
        for layer in range(tr.n_layers):
            scale = max(1.0, float(np.abs(hs[layer][0].numpy()).max()))
            np.testing.assert_allclose(tr.resid[layer], hs[layer][0].numpy(), atol=2e-5 * scale, err_msg=name)
        np.testing.assert_allclose(tr.final_hidden, hs[-1][0].numpy(), atol=1e-4, err_msg=name)


def test_embeddings_are_rows_of_the_embedding_matrix(cases):
    for name, loaded, tr, _, _ in cases:
        w = loaded.model.get_input_embeddings().weight.detach().numpy()
        np.testing.assert_array_equal(tr.embeddings, w[tr.token_ids], err_msg=name)


def test_logits_are_the_lm_head_of_final_hidden(cases):
    for name, loaded, tr, _, _ in cases:
        w = loaded.model.get_output_embeddings().weight.detach().numpy().astype(np.float64)
        np.testing.assert_allclose(tr.final_hidden[-1].astype(np.float64) @ w.T, tr.last_logits, rtol=1e-4, atol=1e-4, err_msg=name)


def _hook_state(model):
    return {name: (tuple(m._forward_hooks), tuple(m._forward_pre_hooks)) for name, m in model.named_modules()}


def test_no_hook_flag_or_record_is_left_on_the_model(cases):
    """Tracing leaves the shared model exactly as it found it (hooks transformers itself may have
    installed for output_hidden_states are its own, and stay the same)."""
    for name, loaded, _, _, _ in cases:
        before = _hook_state(loaded.model)
        config_before = loaded.model.config.to_json_string()
        tr = backends.trace(loaded, "Another prompt, to trace once more.")
        backends.layer_detail(loaded, tr, 0)
        assert _hook_state(loaded.model) == before, name
        assert loaded.model.config.to_json_string() == config_before
        assert loaded.model.config._attn_implementation == xray.NAME
    assert getattr(xray._local, "record", None) is None


def test_eight_threads_each_get_their_own_trace(smol):
    """Each thread traces its prompt and derives one layer (a replay) at the same time as the others."""
    prompts = [f"Prompt number {i}: {w}" for i, w in enumerate(
        ["apples", "苹果很好吃。", "the capital of France", "成都今天适合跑步吗", "小明把书交给小红", "KV cache", "RoPE rotates", "🙂 emoji"])]
    alone = {p: backends.trace(smol, p) for p in prompts}
    alone_detail = {p: backends.layer_detail(smol, alone[p], i) for i, p in enumerate(prompts)}
    together: dict[str, object] = {}
    together_detail: dict[str, object] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(prompts))

    def work(i, p):
        try:
            barrier.wait()
            together[p] = backends.trace(smol, p)
            together_detail[p] = backends.layer_detail(smol, together[p], i)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i, p)) for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for p in prompts:
        a, b = alone[p], together[p]
        for key in ("token_ids", "resid", "attn_out_norm", "mlp_out_norm", "last_logits", "final_hidden"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=f"{p}: {key}")
        for key in ("q", "k", "v", "weights", "attn_out", "mlp_out"):
            np.testing.assert_array_equal(getattr(alone_detail[p], key), getattr(together_detail[p], key), err_msg=f"{p}: {key}")


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
    assert smol.tokenizer.decode(int(tr.last_logits.argmax())).strip() == "The"


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
    np.testing.assert_array_equal(z["q"][3], backends.layer_detail(smol, tr, 3).q)
    assert z["meta"]["omitted"] == {}


def test_cli_trace_writes_the_npz(tmp_path):
    out = tmp_path / "cli.npz"
    r = subprocess.run([sys.executable, "-m", "core", "trace", "Hello world", "-o", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    z = np.load(out)
    assert z["resid"].shape[0] == 31 and json.loads(str(z["meta"]))["prompt"] == "Hello world"
    r = subprocess.run([sys.executable, "-m", "core", "trace", "", "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "empty" in r.stderr


def _ids(smol, n):
    ids: list[int] = []
    while len(ids) < n:
        ids += smol.tokenizer("The history of the transformer architecture begins in 2017. ")["input_ids"]
    return ids[:n]


def test_trace_memory_budget_and_honest_size(smol):
    """A 256-token SmolLM2 trace stays within 40 MB, and ``nbytes`` is what pickling it costs
    (st.cache_data would pickle it; the byte-bounded cache counts it)."""
    import pickle

    tr = backends.trace_ids(smol, _ids(smol, 256))
    assert tr.n_tokens == 256
    assert tr.nbytes < 40e6, tr.nbytes
    assert abs(len(pickle.dumps(tr)) - tr.nbytes) < 0.02 * tr.nbytes


def test_long_trace_attention_equals_hf_eager_at_1024_tokens(smol):
    """At 1,024 tokens, layers derived on demand equal HF eager's output_attentions, rows sum to 1,
    nothing above the diagonal, and k/v equal HF's KV cache."""
    from core.engine.hf import converted_dir, embedded_gguf_path

    ids = _ids(smol, 1024)
    tr = backends.trace_ids(smol, ids)
    ref = _eager_reference(converted_dir(embedded_gguf_path()))
    with torch.inference_mode():
        o = ref(torch.tensor([ids]), output_attentions=True, use_cache=True)
    T = len(ids)
    upper = np.triu_indices(T, 1)
    for layer in (0, 13, 29):
        d = backends.layer_detail(smol, tr, layer)
        w = d.weights.astype(np.float32)
        np.testing.assert_allclose(w, o.attentions[layer][0].numpy(), atol=5e-4, err_msg=f"L{layer}")
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=3e-3)
        assert np.all(w[:, upper[0], upper[1]] == 0)
        np.testing.assert_allclose(d.k, o.past_key_values.layers[layer].keys[0].numpy(), atol=1e-4)
    np.testing.assert_allclose(tr.last_logits, o.logits[0, -1].numpy(), atol=2e-3)


def test_a_replay_that_does_not_reproduce_the_stream_is_refused(smol):
    """The replayed block must give back the kept resid[l+1]; a tampered trace is refused, not drawn."""
    import dataclasses

    tr = backends.trace(smol, "The capital of France is")
    resid = tr.resid.copy()
    resid[5] += 1.0
    bad = dataclasses.replace(tr, resid=resid)
    with pytest.raises(UnsupportedArchitectureError, match="did not reproduce"):
        backends.layer_detail(smol, bad, 5)
    backends.layer_detail(smol, bad, 6)  # layer 6 reads resid[6], untouched: fine


def test_last_position_attention_is_kept_exactly(cases):
    """The trace keeps the last query's weights of every layer (what the prediction reads) for free:
    equal to the derived layers' last row and to HF eager's."""
    for name, _, tr, o, lay in cases:
        assert tr.last_attn.shape == (tr.n_layers, tr.n_heads, tr.n_tokens)
        np.testing.assert_allclose(tr.last_attn, lay["attn_pattern"][:, :, -1, :].astype(np.float32), atol=3e-4, err_msg=name)
        for layer, a in enumerate(o.attentions):
            np.testing.assert_allclose(tr.last_attn[layer], a[0, :, -1, :].numpy(), atol=1e-5, err_msg=f"{name} L{layer}")
