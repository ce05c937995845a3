"""The fast paths of a trace, each against an independent reference:

* the forward asks for the last position's logits only and the others' top-K / log-sum-exp are
  summarised tile by tile from ``final_hidden`` — unless the model post-processes its head's output
  (Cohere's logit scale), which the tracer must notice and then trace with all logits;
* a layer's attention is derived by replaying its attention sub-layer in bands of query rows, each
  seeing only its live key columns — with many bands, and with a sliding window, it must still equal
  HF eager's ``output_attentions``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core import backends
from core.backends import load_model
from core.engine import hf_trace, xray

PROMPT = "Attention is computed in bands of query rows; every row must still match eager exactly. 苹果"


def _build(folder, config) -> str:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.engine.hf import converted_dir, embedded_gguf_path

    load_model(None)  # the converted tokenizer
    tok = AutoTokenizer.from_pretrained(str(converted_dir(embedded_gguf_path())))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config(len(tok)))
    with torch.no_grad():  # bigger random weights than init, so attention is not uniform
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.15)
    model.save_pretrained(str(folder), safe_serialization=True)
    tok.save_pretrained(str(folder))
    return str(folder)


def _eager(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def cohere_dir(tmp_path_factory):
    from transformers import CohereConfig

    return _build(tmp_path_factory.mktemp("cohere"), lambda v: CohereConfig(
        vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, logit_scale=0.5, max_position_embeddings=256, tie_word_embeddings=False,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, architectures=["CohereForCausalLM"]))


@pytest.fixture(scope="module")
def window_dir(tmp_path_factory):
    from transformers import MistralConfig

    return _build(tmp_path_factory.mktemp("window"), lambda v: MistralConfig(
        vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=5, max_position_embeddings=256, tie_word_embeddings=False,
        architectures=["MistralForCausalLM"]))


def _check_logits(loaded, tr, ref: np.ndarray) -> None:
    np.testing.assert_allclose(tr.last_logits, ref[-1], rtol=1e-5, atol=1e-5)
    nt = backends.next_tokens(loaded, tr)  # every position's candidates, derived from final_hidden
    np.testing.assert_allclose(nt.logsumexp, torch.logsumexp(torch.from_numpy(ref), -1).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(nt.ids[:, 0], ref.argmax(-1))
    np.testing.assert_allclose(nt.logits, np.take_along_axis(ref, nt.ids, axis=-1), rtol=1e-5, atol=1e-5)
    rows = [len(ref) - 1, 0]  # any positions, in the order asked
    some = backends.next_tokens(loaded, tr, rows)
    np.testing.assert_array_equal(some.ids, nt.ids[rows])
    want = torch.softmax(torch.from_numpy(ref[rows]).double(), -1).numpy()
    np.testing.assert_allclose(some.probs(), np.take_along_axis(want, some.ids, -1), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(backends.full_logits(loaded, tr), ref, rtol=1e-5, atol=1e-4)


def test_summarised_logits_equal_hf_logits(smol, tiny_loaded, tiny_dirs):
    """Llama-style heads: the last-only forward plus tiles equal an untouched eager model's logits."""
    for name in ("llama", "gpt2"):
        loaded = tiny_loaded[name]
        tr = backends.trace(loaded, PROMPT)
        with torch.inference_mode():
            ref = _eager(str(tiny_dirs[name]))(torch.tensor([tr.token_ids.tolist()])).logits[0].numpy()
        _check_logits(loaded, tr, ref)
        assert hf_trace._HEAD_ALONE.get(type(loaded.model)) is True, name


def test_summary_tiles_cover_the_vocabulary_and_positions(smol, monkeypatch):
    """Tiny tiles (many positions blocks × many vocabulary bands) give the same summary as one tile."""
    tr = backends.trace(smol, PROMPT)
    head = hf_trace.find_sites(smol.model).lm_head
    fh = torch.from_numpy(np.array(tr.final_hidden))
    monkeypatch.setattr(hf_trace, "HEAD_ROWS", 7)
    monkeypatch.setattr(hf_trace, "HEAD_BAND_BYTES", 7 * 4 * 300)  # bands of 300 of the 49,152 ids
    values, ids, lse = hf_trace._head_summary(head, fh)
    with torch.inference_mode():
        full = head(fh)
    np.testing.assert_array_equal(ids.numpy(), torch.topk(full, 10).indices.numpy())
    np.testing.assert_allclose(values.numpy(), torch.topk(full, 10).values.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lse.numpy(), torch.logsumexp(full, -1).numpy(), rtol=1e-6, atol=1e-5)


def test_a_scaled_head_is_noticed_and_traced_with_all_logits(cohere_dir):
    """Cohere multiplies its head's output by logit_scale: reading final_hidden × W alone would be wrong."""
    loaded = load_model(cohere_dir)
    tr = backends.trace(loaded, PROMPT)
    assert hf_trace._HEAD_ALONE[type(loaded.model)] is False
    with torch.inference_mode():
        ref = _eager(cohere_dir)(torch.tensor([tr.token_ids.tolist()])).logits[0].numpy()
    _check_logits(loaded, tr, ref)
    tr2 = backends.trace(loaded, PROMPT + " again")  # later traces go straight to all logits
    with torch.inference_mode():
        ref2 = _eager(cohere_dir)(torch.tensor([tr2.token_ids.tolist()])).logits[0].numpy()
    _check_logits(loaded, tr2, ref2)


def _hf_attentions(folder: str, ids: list[int]) -> tuple:
    with torch.inference_mode():
        return _eager(folder)(torch.tensor([ids]), output_attentions=True).attentions


@pytest.mark.parametrize("band_bytes", [1, xray.BAND_BYTES])
def test_banded_attention_equals_hf_eager(tiny_loaded, tiny_dirs, window_dir, monkeypatch, band_bytes):
    """With bands of 16 rows (band_bytes=1) and with the default, for a causal model, a sliding-window
    model (whose early columns are masked again) and SmolLM2's own architecture family."""
    monkeypatch.setattr(xray, "BAND_BYTES", band_bytes)
    prompt = PROMPT * 2  # ≈ 60 tokens: several bands of 16
    for name, folder, loaded in (("llama", str(tiny_dirs["llama"]), tiny_loaded["llama"]),
                                 ("window", window_dir, load_model(window_dir))):
        tr = backends.trace(loaded, prompt)
        assert tr.n_tokens > 40
        want = _hf_attentions(folder, tr.token_ids.tolist())
        for layer in range(tr.n_layers):
            d = backends.layer_detail(loaded, tr, layer)
            np.testing.assert_allclose(d.weights.astype(np.float32), want[layer][0].numpy(), atol=1e-3, err_msg=f"{name} L{layer}")
            assert np.all(np.triu(d.weights.astype(np.float32), 1) == 0)
            np.testing.assert_allclose(d.weights.astype(np.float32).sum(-1), 1.0, atol=5e-3)
    if band_bytes == 1:  # the window really masks early columns: row 30 gives column 0 nothing
        assert float(d.weights[0, 30, 0]) == 0.0


def test_last_live_column():
    fill = torch.finfo(torch.float32).min
    causal = torch.triu(torch.full((6, 6), fill), 1)[None, None]
    assert xray._last_live_column(causal[:, :, 0:2]) == 2
    assert xray._last_live_column(causal[:, :, 3:6]) == 6
    dead = causal.clone()
    dead[0, 0, 1] = fill  # a row masked everywhere: eager's answer involves every column
    assert xray._last_live_column(dead[:, :, 0:3]) == 6
    assert xray._last_live_column(torch.ones(1, 1, 2, 5, dtype=torch.bool).tril_()) == 2
