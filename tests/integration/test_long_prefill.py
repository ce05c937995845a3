"""A long prompt's continuation starts from the trace, not from a second prefill (issue 28).

Above ``hf_trace.KV_KEEP_MAX`` tokens a trace keeps no keys and values (memory); the journey's loop then
forms them again from the trace's kept residual stream, each layer's projections only
(``hf_trace.prompt_kv``). Bound lowered here so that a short prompt takes the long prompts' route."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.long_prefill import _same_cache

from core import backends
from core.engine import hf_trace, xray
from core.learn import journey

PROMPT = "The transformer reads every token of its context at once. Each block lets positions exchange information."


def test_a_long_trace_gives_the_prefill_without_running_it(smol, short_bound):
    tr = backends.trace(smol, PROMPT)
    assert tr.n_tokens > hf_trace.KV_KEEP_MAX and not tr.keeps("k") and not tr.keeps("v")
    calls = []
    handles = [m.register_forward_pre_hook(lambda *_: calls.append(1)) for m in (smol.model, *smol.model.model.layers)]
    try:
        kept = backends.prompt_prefill(smol, tr)
    finally:
        for h in handles:
            h.remove()
    assert kept is not None and calls == []  # no forward pass of the model or of a block: the projections alone
    fresh = backends.forward_step(smol, tr.token_ids.tolist())
    assert np.array_equal(kept.last_logits, fresh.last_logits)
    _same_cache(kept.cache, fresh.cache)  # bitwise the prefill's KV cache
    assert tr.__dict__["_derived"] == {}  # the shared trace did not grow


def test_a_long_trace_continues_as_a_plain_generate(smol, short_bound):
    tr = backends.trace(smol, PROMPT)
    ids = tr.token_ids.tolist()
    got = journey.greedy_continuation(smol, ids, max_new=8, prefill=backends.prompt_prefill(smol, tr))
    assert got == journey.greedy_continuation(smol, ids, max_new=8)
    with torch.inference_mode():
        ref = smol.model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)[0, len(ids):].tolist()
    assert got[0] == ref[: len(got[0])]


def test_a_kv_only_recording_stops_the_module(smol):
    """kv_only: the attention call keeps its key and value and stops the module (no attention computed)."""
    tr = backends.trace(smol, "Hello")
    kv = hf_trace.prompt_kv(smol, tr)
    assert kv is not None and len(kv) == smol.facts.n_layers
    with xray.recording(kv_only=True) as rec, pytest.raises(xray.KVTaken), torch.inference_mode():
        smol.model(input_ids=torch.tensor([tr.token_ids.tolist()]), use_cache=False)
    assert len(rec.calls) == 1


def test_a_long_prompt_continues_only_when_asked(smol, monkeypatch):
    """Above ``journey.DEFER_ABOVE`` tokens the journey's first visit runs no decoding step: stage 9 offers a
    button that says why; its click shows the greedy continuation, the same tokens as HF's generate on the
    same prompt (same route: the model's own forward, greedy). Bound lowered so that a short prompt is long."""
    from streamlit.testing.v1 import AppTest

    from conftest import ROOT
    from core.engine.types import EMBEDDED_ID
    from core.web import cache

    monkeypatch.setattr(journey, "DEFER_ABOVE", 8)
    cache.get_continuation.clear()  # no answer left by another test: a click must decode
    steps = []
    step = backends.forward_step
    monkeypatch.setattr(backends, "forward_step", lambda *a, **kw: steps.append(1) or step(*a, **kw))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.session_state["prompt"] = PROMPT
    at.session_state["chat"] = False
    at.run()
    assert not at.exception
    assert steps == []  # the first visit decoded nothing
    assert not [m for m in at.markdown if m.value.startswith("Decoded together")]
    assert [m for m in at.markdown if "tokens, more than 8: here the loop runs only when you ask" in m.value]
    button = at.button(key="journey_continue")
    assert button.label == f"Continue the text ({journey.MAX_NEW} tokens)"
    button.click().run()
    assert not at.exception and steps  # the click ran the loop
    ids = backends.encode_prompt(smol, PROMPT, chat=False).ids  # what the page traced
    with smol.lock, torch.inference_mode():
        ref = smol.model.generate(torch.tensor([ids]), max_new_tokens=journey.MAX_NEW, do_sample=False)[0, len(ids):].tolist()
    line = next(m.value for m in at.markdown if m.value.startswith("Decoded together"))
    assert " ".join(smol.tokenizer.decode(ref).split()).replace("`", "ˋ") in line
    assert cache.get_continuation(cache.get_trace(EMBEDDED_ID, PROMPT, False), journey.MAX_NEW)[0] == ref  # the tokens the page showed
    at.run()  # a rerun (e.g. a slider moved) keeps the answer shown
    assert [m for m in at.markdown if m.value.startswith("Decoded together")]
