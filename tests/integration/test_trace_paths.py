"""The fast paths of a trace, each against an independent reference:

* the forward asks for the last position's logits only and the others' top-K / log-sum-exp are
  summarised tile by tile from ``final_hidden`` — unless the model post-processes its head's output
  (Cohere's logit scale), which the tracer must notice and then trace with all logits;
* a layer's attention is derived by replaying its attention sub-layer in bands of query rows, each
  seeing only its live key columns — with many bands, and with a sliding window, it must still equal
  HF eager's ``output_attentions``.
"""

from __future__ import annotations

import floats
import numpy as np
import pytest
import torch
from floats import allowed_error, assert_f16_as_accurate, assert_rows_sum_to_one

from conftest import EagerReference
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


def _logits(ref: EagerReference, ids) -> tuple[np.ndarray, np.ndarray]:
    """An untouched eager model's logits [T, V] of ``ids``, in float32 and in float64 (the exact answer)."""
    return tuple(ref.run(ids, dt).logits[0].numpy() for dt in ("float32", "float64"))


def _lse(x: np.ndarray) -> np.ndarray:
    m = x.max(-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[..., 0]


def assert_top_k(ids, values, exact, allowed, what: str) -> None:
    """``ids``/``values`` [n, K] are a top-K of the rows of ``exact`` [n, V] as far as float32 can tell, with
    every logit allowed ``allowed`` of error (a number or [n, 1]): the values are the K largest exact logits
    within it (the k-th largest moves no more than the logits do), each id's exact logit is its value within
    it, and no id twice. (So the order can differ from the exact one only between logits that close.)"""
    exact = np.asarray(exact, np.float64)
    floats.assert_within(values, -np.sort(-exact, -1)[:, : values.shape[-1]], allowed, f"{what} top-K values")
    floats.assert_within(values, np.take_along_axis(exact, ids, -1), allowed, f"{what} the ids' logits")
    assert all(len(set(row)) == len(row) for row in np.asarray(ids).tolist()), what


def _check_logits(loaded, tr, ref32: np.ndarray, ref64: np.ndarray) -> None:
    """The trace (SDPA) against an untouched eager model: every number as close to the exact (float64)
    one as the eager model's own float32 route (``floats.assert_as_accurate``)."""
    allowed = allowed_error(ref32, ref64)
    floats.assert_as_accurate(tr.last_logits, ref32[-1], ref64[-1], "last logits")
    nt = backends.next_tokens(loaded, tr)  # every position's candidates, derived from final_hidden
    lse32, lse64 = torch.logsumexp(torch.from_numpy(ref32), -1).numpy(), _lse(ref64)
    floats.assert_as_accurate(nt.logsumexp, lse32, lse64, "lse")
    assert_top_k(nt.ids, nt.logits, ref64, allowed, "every position")  # the first of them: the argmax
    rows = [len(ref32) - 1, 0]  # any positions, in the order asked
    some = backends.next_tokens(loaded, tr, rows)
    assert some.positions.tolist() == rows
    assert_top_k(some.ids, some.logits, ref64[rows], allowed, "some positions")
    # p = exp(logit − lse): the logit and the lse each within what is allowed them
    want = np.take_along_axis(np.exp(ref64[rows] - lse64[rows, None]), some.ids, -1)
    floats.assert_within(some.probs(), want, want * np.expm1(allowed + allowed_error(lse32, lse64)), "probabilities",
                         "the logit's and the lse's allowed error through exp")
    floats.assert_as_accurate(backends.full_logits(loaded, tr), ref32, ref64, "all logits")


def test_summarised_logits_equal_hf_logits(smol, tiny_loaded, eager_refs):
    """Llama-style heads: the last-only forward plus tiles equal an untouched eager model's logits."""
    for name in ("llama", "gpt2"):
        loaded = tiny_loaded[name]
        tr = backends.trace(loaded, PROMPT)
        _check_logits(loaded, tr, *_logits(eager_refs[name], tr.token_ids))
        assert hf_trace._HEAD_ALONE.get(type(loaded.model)) is True, name


def test_summary_tiles_cover_the_vocabulary_and_positions(smol, monkeypatch):
    """Tiny tiles (many positions blocks × many vocabulary bands) give the same summary as one tile: as
    close to the exact (float64) head's as the one tile is."""
    tr = backends.trace(smol, PROMPT)
    head = hf_trace.find_sites(smol.model).lm_head
    fh = torch.from_numpy(np.array(tr.final_hidden))
    monkeypatch.setattr(hf_trace, "HEAD_ROWS", 7)
    monkeypatch.setattr(hf_trace, "HEAD_BAND_BYTES", 7 * 4 * 300)  # bands of 300 of the 49,152 ids
    values, ids, lse = hf_trace._head_summary(head, fh)
    with torch.inference_mode():
        full = head(fh).numpy()
    exact = tr.final_hidden.astype(np.float64) @ head.weight.detach().numpy().T.astype(np.float64)
    assert_top_k(ids.numpy(), values.numpy(), exact, allowed_error(full, exact), "tiles")
    floats.assert_as_accurate(lse.numpy(), torch.logsumexp(torch.from_numpy(full), -1).numpy(), _lse(exact), "tiles lse")


def test_a_scaled_head_is_noticed_and_traced_with_all_logits(cohere_dir):
    """Cohere multiplies its head's output by logit_scale: reading final_hidden × W alone would be wrong."""
    loaded = load_model(cohere_dir)
    ref = EagerReference(cohere_dir)
    tr = backends.trace(loaded, PROMPT)
    assert hf_trace._HEAD_ALONE[type(loaded.model)] is False
    _check_logits(loaded, tr, *_logits(ref, tr.token_ids))
    tr2 = backends.trace(loaded, PROMPT + " again")  # later traces go straight to all logits
    _check_logits(loaded, tr2, *_logits(ref, tr2.token_ids))


@pytest.mark.parametrize("band_bytes", [1, xray.BAND_BYTES])
def test_banded_attention_equals_hf_eager(tiny_loaded, eager_refs, window_dir, monkeypatch, band_bytes):
    """With bands of 16 rows (band_bytes=1) and with the default, for a causal model, a sliding-window
    model (whose early columns are masked again) and SmolLM2's own architecture family: HF eager's
    output_attentions, up to float16 storage and float32 rounding no larger than HF's own."""
    monkeypatch.setattr(xray, "BAND_BYTES", band_bytes)
    prompt = PROMPT * 2  # ≈ 60 tokens: several bands of 16
    for name, ref, loaded in (("llama", eager_refs["llama"], tiny_loaded["llama"]),
                              ("window", EagerReference(window_dir), load_model(window_dir))):
        tr = backends.trace(loaded, prompt)
        assert tr.n_tokens > 40
        o32, o64 = (ref.run(tr.token_ids, dt, output_attentions=True) for dt in ("float32", "float64"))
        for layer in range(tr.n_layers):
            d = backends.layer_detail(loaded, tr, layer)
            a32, a64 = o32.attentions[layer][0].numpy(), o64.attentions[layer][0].numpy()
            assert_f16_as_accurate(d.attn_pattern, a64, allowed_error(a32, a64), f"{name} L{layer}")
            assert np.all(np.triu(d.attn_pattern.astype(np.float32), 1) == 0)
            assert_rows_sum_to_one(d.attn_pattern, f"{name} L{layer} rows")
    if band_bytes == 1:  # the window really masks early columns: row 30 gives column 0 nothing
        assert float(d.attn_pattern[0, 30, 0]) == 0.0
