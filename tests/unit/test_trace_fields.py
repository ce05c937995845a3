"""Every site of the trace contract answers as a field (``tr.attn_pattern``, ``tr.q`` …), kept or derived,
with the same numbers as the one accessor the pages use; and where it cannot, it says why."""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest

from core import backends
from core.engine import trace as trace_mod
from core.engine.trace import LAYER_SITES, SiteTooLargeError

PROMPT = "The capital of France is Paris, and 苹果很好吃。"


@pytest.fixture()
def llama(tiny_loaded):
    return tiny_loaded["llama"]


def test_an_hf_trace_keeps_the_stream_and_derives_the_layer_sites(llama):
    tr = backends.trace(llama, PROMPT)
    assert not tr.keeps("attn_pattern") and not tr.keeps("q") and tr.keeps("k")  # k, v: the prefill's KV cache
    details = [backends.layer_detail(llama, tr, layer) for layer in range(tr.n_layers)]
    for site in LAYER_SITES:
        want = np.stack([getattr(d, site) for d in details])
        got = getattr(tr, site)
        np.testing.assert_array_equal(got, want, err_msg=site)  # the same replay, the same bits
        assert got.nbytes == tr.site_bytes(site), site  # what the docstring says reading it costs
        assert not got.flags.writeable  # shared like every array of a trace
        assert getattr(tr, site) is got  # derived once, then kept on the object
    np.testing.assert_array_equal(tr.attention(1), details[1].attn_pattern.astype(np.float32))
    np.testing.assert_array_equal(tr.site("q", 1), details[1].q)  # the one door, one layer
    assert tr.layer(2).layer == 2


def test_reading_a_derived_site_is_counted_in_the_trace_size(llama):
    tr = backends.trace(llama, PROMPT)
    before = tr.nbytes
    _ = tr.attn_pattern
    assert tr.nbytes == before + tr.site_bytes("attn_pattern")


def test_the_pages_accessors_never_derive_a_whole_site(llama):
    """The app reads one layer at a time through the byte-bounded cache: a shared trace must not grow."""
    tr = backends.trace(llama, PROMPT)
    backends.layer_detail(llama, tr, 0)
    backends.attention(llama, tr, 1)
    assert backends.prompt_prefill(llama, tr) is not None
    assert tr.__dict__["_derived"] == {}


def test_the_toy_keeps_every_site(toy):
    tr = backends.trace(toy, "hello world")
    for site in LAYER_SITES:
        assert tr.keeps(site), site
    np.testing.assert_array_equal(tr.attention(0), tr.attn_pattern[0].astype(np.float32))


def test_a_long_trace_refuses_the_whole_pattern_and_says_the_way_round(llama, monkeypatch):
    monkeypatch.setattr(trace_mod, "PATTERN_EXPORT_MAX", 8)
    tr = backends.trace(llama, PROMPT)
    assert tr.n_tokens > 8
    with pytest.raises(SiteTooLargeError, match=r"tr\.attention\(layer\)") as e:
        _ = tr.attn_pattern
    assert f"{tr.n_tokens:,}-token" in str(e.value) and "GB" in str(e.value)
    assert tr.attention(0).shape == (tr.n_heads, tr.n_tokens, tr.n_tokens)  # one layer still works
    assert tr.q.shape[0] == tr.n_layers  # the other sites are linear in T: still given


def test_a_trace_without_its_model_says_so(llama):
    tr = backends.trace(llama, PROMPT)
    copy = pickle.loads(pickle.dumps(tr))  # the model does not travel with a pickled trace
    assert copy.attn_pattern is None and copy.keeps("k")
    np.testing.assert_array_equal(copy.k, tr.k)
    with pytest.raises(RuntimeError, match=r"core\.layer_detail"):
        copy.layer(0)


def test_a_trace_does_not_keep_its_model_alive(tiny_dirs):
    loaded = backends.load_model(str(tiny_dirs["mistral"]))
    tr = backends.trace(loaded, PROMPT)
    del loaded
    gc.collect()
    with pytest.raises(RuntimeError, match="no longer loaded"):
        _ = tr.attn_pattern


def test_unknown_site_is_named():
    with pytest.raises(KeyError, match="per-layer site"):
        trace_mod.Trace.keeps(None, "resid")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def toy():
    return backends.load_model("toy")
