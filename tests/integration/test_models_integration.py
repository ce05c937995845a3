"""The loader: the embedded SmolLM2 and its facts, local folders, and clear refusals."""

from __future__ import annotations

import torch

from core.backends import load_model


def test_smollm2_facts(smol):
    f = smol.facts
    assert (f.n_layers, f.n_heads, f.n_kv_heads, f.head_dim, f.d_model, f.vocab_size) == (30, 9, 3, 64, 576, 49152)
    assert (f.d_ff, f.norm_type, f.position_type, f.ffn_type, f.attention_kind) == (1536, "RMSNorm", "RoPE", "SwiGLU", "GQA")
    assert f.tied_embeddings and f.rope_theta == 100000.0
    assert f.n_params == smol.model.num_parameters() == 134_515_008
    assert f.kv_bytes_per_token(4) == 2 * 30 * 3 * 64 * 4


def test_greedy_chat_answer_is_paris(smol):
    tok = smol.tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with smol.lock, torch.inference_mode():
        out = smol.model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_warm_start_reads_the_cached_safetensors(monkeypatch):
    """The GGUF is converted once; later loads read the cached safetensors and never convert it again
    (how long a warm start takes: tests/benchmarks/bench_refusals.py)."""
    from core.engine import hf

    load_model(None)  # converts the GGUF on a fresh machine
    conv = hf.converted_dir(hf.embedded_gguf_path())
    written = (conv / "model.safetensors").stat().st_mtime_ns
    read: list[str] = []
    real = hf._from_pretrained

    def converting(*a, **kw):
        raise AssertionError("a warm start converted the GGUF again")

    def reading(path, **kw):
        read.append(str(path))
        return real(path, **kw)

    monkeypatch.setattr(hf, "_convert_gguf", converting)
    monkeypatch.setattr(hf, "_from_pretrained", reading)
    loaded = load_model(None)
    assert read == [str(conv)]
    assert loaded.model.num_parameters() == 134_515_008
    assert (conv / "model.safetensors").stat().st_mtime_ns == written
