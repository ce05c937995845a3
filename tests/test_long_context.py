"""Long prompts: the byte-bounded cache, what a map figure draws (averaged overview or exact window),
the long-document presets and their planted facts, and the long-context page on a ~3,000-token
document (figures stay small, the exact last-row weights are what is drawn)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from core import backends
from core.engine import attnview
from core.engine.memo import ByteLRU
from core.inside import longctx
from core.learn import long_docs

APP = str(ROOT / "app.py")


class _Blob:
    def __init__(self, n: int) -> None:
        self.nbytes = n


# ---------------------------------------------------------------------------------------------
# the byte-bounded cache


def test_byte_lru_evicts_by_bytes_least_recently_used_first():
    c = ByteLRU(100)
    for k in "abcd":
        c.get(k, lambda: _Blob(30))
    assert c.stats()["bytes"] == 90 and len(c) == 3
    assert "a" not in c and all(k in c for k in "bcd")
    c.get("b", lambda: _Blob(30))  # b becomes the most recent
    c.get("e", lambda: _Blob(30))
    assert "c" not in c and "b" in c and c.total <= 100
    big = c.get("huge", lambda: _Blob(1000))  # bigger than the budget: returned, not kept
    assert big.nbytes == 1000 and "huge" not in c and c.total <= 100


def test_byte_lru_computes_a_key_once_for_concurrent_callers():
    c = ByteLRU(10**6)
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return _Blob(10)

    out = []
    threads = [threading.Thread(target=lambda: out.append(c.get("k", slow))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(out) == 6 and all(o is out[0] for o in out)


def test_byte_lru_retries_after_a_failed_computation():
    c = ByteLRU(100)
    with pytest.raises(RuntimeError):
        c.get("k", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert c.get("k", lambda: _Blob(5)).nbytes == 5


# ---------------------------------------------------------------------------------------------
# what a map figure draws


def _causal(T: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = np.tril(rng.random((T, T)))
    return w / w.sum(-1, keepdims=True)


def test_overview_is_exact_when_short_and_block_means_when_long():
    w = _causal(40)
    v = attnview.overview(w)
    assert v.exact and v.whole and np.array_equal(v.z, w.astype(np.float32))
    w = _causal(200)
    v = attnview.overview(w, cells=64)
    assert v.block == 4 and v.n == 50 and not v.exact
    np.testing.assert_allclose(v.z[3, 2], w[12:16, 8:12].mean(), rtol=1e-6)
    assert v.span(49) == (196, 199)


def test_overview_last_partial_block_averages_what_it_holds():
    w = _causal(130)
    v = attnview.overview(w, cells=64)  # block 3: 44 cells, the last one covers positions 129 only
    assert v.block == 3 and v.n == 44
    np.testing.assert_allclose(v.z[43, 43], w[129, 129], rtol=1e-6)
    np.testing.assert_allclose(v.z[43, 0], w[129, 0:3].mean(), rtol=1e-6)


def test_window_is_exact_and_clamped():
    w = _causal(300)
    v = attnview.view(w, start=290, cells=64)
    assert v.exact and v.start == 236 and v.n == 64
    np.testing.assert_array_equal(v.z, w[236:300, 236:300].astype(np.float32))


# ---------------------------------------------------------------------------------------------
# long-context numbers


def test_pooled_keys_sum_to_the_row():
    rows = np.random.default_rng(1).random((3, 2, 1000))
    z, b = longctx.pooled_keys(rows, cells=256)
    assert b == 4 and z.shape == (3, 2, 250)
    np.testing.assert_allclose(z.sum(-1), rows.sum(-1))
    assert longctx.span_mass(rows, 10, 19)[1, 1] == pytest.approx(rows[1, 1, 10:20].sum())
    assert longctx.uniform_share(10, 19, 1000) == pytest.approx(0.01)


def test_long_documents_plant_their_fact_once_and_the_span_is_found(smol):
    from core.engine.tokens import encode

    expected = {"en": (80, 99), "zh": (151, 198)}  # measured in assets/long/README.md
    for key in long_docs.KEYS:
        doc = long_docs.load(key)
        assert long_docs.which(doc.text) == key and doc.text.count(doc.fact) == 1
        enc = encode(smol.tokenizer, doc.text)
        assert 2800 <= len(enc.ids) <= 3300
        a, b = long_docs.span_of(smol.tokenizer, enc.text, enc.ids, doc.fact)
        assert (a, b) == expected[key]
        assert doc.fact.strip(" 。.") in smol.tokenizer.decode(enc.ids[a : b + 1])
    assert long_docs.which("hello") is None


def test_the_english_document_is_answered_from_its_planted_fact(smol):
    """SmolLM2 retrieves the fact ~3,100 tokens back (README: ' green' at 0.44), and some heads at the
    last position put far more than a uniform share on the fact's tokens."""
    doc = long_docs.load("en")
    tr = backends.trace(smol, doc.text)
    assert smol.tokenizer.decode([int(tr.top_ids[-1, 0])]) == " green"
    mass = longctx.span_mass(tr.last_attn, 80, 99)
    assert mass.max() > 20 * longctx.uniform_share(80, 99, tr.n_tokens)


# ---------------------------------------------------------------------------------------------
# the page on a long document


def _chart_bytes(at) -> int:
    return sum(len(c.proto.spec) for c in at.get("plotly_chart"))


def test_long_context_page_on_a_long_document(smol):
    from core.engine.tokens import encode

    at = AppTest.from_file(APP, default_timeout=600)
    at.run()
    at.selectbox(key="preset_pick").set_value("long:en").run()
    assert not at.exception
    assert at.query_params.get("doc") == "en" and "prompt" not in at.query_params  # a link names the document
    at.switch_page("pages/long_context.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    span = next(s for s in at.slider if str(s.key).startswith("longctx_span"))
    enc = encode(smol.tokenizer, long_docs.load("en").text, chat=bool(at.session_state["chat"]))
    assert tuple(span.value) == long_docs.span_of(smol.tokenizer, enc.text, enc.ids, long_docs.load("en").fact)
    assert _chart_bytes(at) < 5e6
    for stem in ("heads", "masks"):
        at.switch_page(f"pages/{stem}.py")
        at.run()
        assert not at.exception, (stem, [e.value for e in at.exception])
        assert _chart_bytes(at) < 5e6, stem
