"""The journey page's numbers against independent references."""

from __future__ import annotations

import inspect
from html import escape

import floats
import numpy as np
import torch
from helpers.journey import _check_sources

from core import backends
from core.learn import journey


def test_greedy_loop_equals_hf_generate(smol):
    tr = backends.trace(smol, "What is the capital of France?", chat=True)
    new, stopped = journey.greedy_continuation(smol, tr.token_ids.tolist(), max_new=20)
    with smol.lock, torch.inference_mode():
        ref = smol.model.generate(torch.from_numpy(tr.token_ids)[None], max_new_tokens=20, do_sample=False)[0, tr.n_tokens:]
    assert new == ref.tolist()[: len(new)]
    assert stopped and new[-1] == 2  # <|im_end|>
    assert "Paris" in smol.tokenizer.decode(new)


def test_greedy_loop_stops_at_the_limit(smol):
    new, stopped = journey.greedy_continuation(smol, smol.tokenizer("Once upon a time")["input_ids"], max_new=5)
    assert len(new) == 5 and not stopped


def test_greedy_loop_continues_from_a_given_prefill(smol):
    """A prefill the caller already ran (its cache and last scores) gives the same answer as the loop's own."""
    ids = smol.tokenizer("The capital of France is")["input_ids"]
    ref, ref_stopped = journey.greedy_continuation(smol, ids, max_new=6)
    first = backends.forward_step(smol, ids)
    assert journey.greedy_continuation(smol, ids, max_new=6, prefill=first) == (ref, ref_stopped)
    assert backends.cache_layers(first.cache)[0][0].shape[-2] == len(ids) + len(ref) - 1  # extended in place



def test_top_next_tokens_are_the_softmax_of_the_real_logits(smol):
    tr = backends.trace(smol, "The capital of France is")
    with smol.lock, torch.inference_mode():
        out = smol.model(torch.from_numpy(tr.token_ids)[None], output_hidden_states=True)
    logits = out.logits[0, -1].double()
    p = torch.softmax(logits, -1)
    rows = journey.top_next_tokens(tr, smol.tokenizer, k=5)
    assert [r[1] for r in rows] == torch.topk(logits, 5).indices.tolist()
    # the trace asked for the last position's logits only, this forward for all of them: the same final
    # hidden vector through the LM head's product in other shapes, two float32 routes each within the
    # head's allowance A of the exact logits; a softmax moves log p by ≤ twice their 2A (+ its float64 rounding)
    floats.assert_same(tr.final_hidden[-1], out.hidden_states[-1][0, -1].numpy(), "the final hidden vector")
    got, want = np.array([r[3] for r in rows]), p[[r[1] for r in rows]].numpy()
    moved = np.expm1(2 * 2 * floats.head_allowance(smol, tr.final_hidden[-1])) + 2 * floats.gamma(len(p) + 4, floats.U64)
    floats.assert_within(got, want, np.maximum(got, want) * moved, what="top-5 probabilities",
                         why="softmax of two float32 routes of the LM head's product")
    assert rows[0][0] == " Paris"


def test_norms_are_of_hf_hidden_states(smol):
    tr = backends.trace(smol, "苹果很好吃。")
    with smol.lock, torch.inference_mode():
        hs = smol.model(torch.from_numpy(tr.token_ids)[None], output_hidden_states=True).hidden_states
    # the trace's stream IS HF's hidden states (the same forward pass, bit for bit), so their norms are the
    # same computation on the same numbers (hs[-1] is after the final norm)
    hf = np.stack([h[0, -1].numpy() for h in hs[:-1]])
    floats.assert_same(tr.resid[:-1, -1], hf, "the last token's stream")
    floats.assert_same(journey.last_token_norms(tr)[:-1], np.linalg.norm(hf.astype(np.float64), axis=-1), "its norms")


def test_journey_page_chinese_prompt_groups_bytes_and_decodes_the_answer(smol):
    """我喜欢人工智能: the prompt's byte tokens are framed per character; the greedy answer is shown
    decoded as text beside its chips (never only ‹E6 88› chips); a link carries the layer."""
    from streamlit.testing.v1 import AppTest

    from conftest import ROOT
    from core.engine import tokens

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.session_state["prompt"] = "我喜欢人工智能"
    at.session_state["chat"] = True
    at.query_params["layer"] = "9"
    at.run()
    assert not at.exception
    html = [m.value for m in at.markdown if 'class="xr-chip"' in m.value]
    assert html[0].count('class="xr-group"') == 5  # 我 喜 欢 工 智: each character's bytes framed together
    tr = backends.trace(smol, "我喜欢人工智能", chat=True)
    new, _ = journey.greedy_continuation(smol, tr.token_ids.tolist(), max_new=24)
    decoded = smol.tokenizer.decode(new)
    line = next(m.value for m in at.markdown if m.value.startswith("Decoded together"))
    assert " ".join(decoded.split()).replace("`", "ˋ") in line
    want = [f'data-piece="{escape(lbl, quote=True)}"' for lbl in tokens.sequence_labels(smol.tokenizer, new)]
    assert [h for h in html[1:] if all(w in h for w in want)]  # the answer's chips, by the one label rule
    assert at.slider(key="journey_layer").value == 9 and at.query_params["layer"] in ("9", ["9"])


def test_the_trace_is_the_prefill(smol):
    """The trace's own pass kept every layer's keys and values: a cache built of them is bitwise the
    prefill's, so the journey's loop decodes from it without running the prompt again."""
    tr = backends.trace(smol, "What is the capital of France?", chat=True)
    kept = backends.prompt_prefill(smol, tr)
    fresh = backends.forward_step(smol, tr.token_ids.tolist())
    assert np.array_equal(kept.last_logits, fresh.last_logits)
    for (k1, v1), (k2, v2) in zip(backends.cache_layers(kept.cache), backends.cache_layers(fresh.cache), strict=True):
        assert torch.equal(k1, k2) and torch.equal(v1, v2)
    assert journey.greedy_continuation(smol, tr.token_ids.tolist(), prefill=kept) == journey.greedy_continuation(smol, tr.token_ids.tolist())


def test_stage_sources_of_smollm2_are_its_installed_llama_code(smol):
    src = journey.stage_sources(smol)
    blocks = smol.model.model.layers
    llama = inspect.getsourcefile(type(blocks[0]))
    _check_sources(src, model_file=llama)
    names = {s.name for places in src.values() for s in places}
    assert {"LlamaDecoderLayer.forward", "LlamaAttention.forward", "LlamaMLP.forward", "LlamaRMSNorm.forward",
            "LlamaRotaryEmbedding.forward", "apply_rotary_pos_emb", "Embedding.forward", "Linear.forward"} <= names
    assert all(s.path.startswith("transformers/models/llama/modeling_llama.py") for s in src[5][1:2])
    # the lines that call the parts, in the model's own forward
    assert "self.embed_tokens(" in next(s.text for s in src[4] if "embed_tokens" in s.name)
    assert "self.lm_head(" in src[7][0].text and "self.norm(" in src[6][0].text
