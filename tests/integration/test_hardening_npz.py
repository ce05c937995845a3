"""The .npz download is bounded (issue 39): a 4,096-token trace made a 1.97 GB file and one click took the server
from 2.4 to 8.3 GB. ``core.web.download.size_bound`` is an upper bound of the file from the trace's shapes
(checked against real files, and not loose); a trace over ``XRAY_NPZ_MB`` gets a sentence instead of the
button, and nothing is built; under it, building one file holds memory in proportion to the bound."""

from __future__ import annotations

import tracemalloc

import pytest
from streamlit.testing.v1 import AppTest

import core.backends as backends
from core.common import settings
from core.web import cache, download

WORDS = "the quick brown fox jumps over a lazy dog while seven violins play "


@pytest.mark.parametrize("n_words", [3, 60, 200])
def test_the_bound_holds_the_real_file(tiny_dirs, n_words):
    spec = str(tiny_dirs["llama"])
    loaded = cache.get_model(spec)
    tr = backends.trace(loaded, " ".join((WORDS * 40).split()[:n_words]), max_tokens=2048)
    size = len(backends.export_npz_bytes(loaded, tr))
    bound = download.size_bound(tr)
    assert size <= bound < 1.5 * size + (256 << 10), (tr.n_tokens, size, bound)


def test_the_bound_of_a_long_trace_on_the_real_shapes_is_over_the_limit(tiny_dirs):
    """The issue's figure: SmolLM2's shapes (30 layers, 9 heads, d 576, vocabulary 49,152) at 4,096 tokens."""
    tr = backends.trace(cache.get_model(str(tiny_dirs["llama"])), "a b c", max_tokens=64)
    dims = dict(n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64, d_model=576, vocab_size=49152)
    real = type("Shaped", (), {**{k: property(lambda self, v=v: v) for k, v in dims.items()},
                               "n_tokens": property(lambda self: 4096)})
    shaped = type("T", (real, type(tr)), {})
    fake = object.__new__(shaped)
    fake.__dict__.update(tr.__dict__)
    fake.__dict__["tokens"] = ["tok"] * 4096
    assert download.size_bound(fake) >= 1.97e9 > download.limit_bytes()


def test_building_one_file_holds_memory_in_proportion_to_its_bound(tiny_dirs):
    spec = str(tiny_dirs["llama"])
    tr = cache.get_trace(spec, " ".join((WORDS * 20).split()[:150]), False)
    bound = download.size_bound(tr)
    tracemalloc.start()
    try:
        data = cache.get_trace_npz(tr)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(data) <= bound
    assert peak <= 5 * bound, f"building a {len(data):,}-byte file peaked at {peak:,} bytes"


PAGE = """
import sys
from core.web import cache, ui
tr = cache.get_trace(sys.argv[-1], "a prompt for the download button", False)
ui.download_trace(tr, "t")
"""


def _page(spec: str) -> AppTest:
    at = AppTest.from_string(PAGE.replace("sys.argv[-1]", repr(spec)), default_timeout=120)
    return at.run()


def test_a_trace_over_the_limit_gets_a_sentence_and_nothing_is_built(tiny_dirs, monkeypatch):
    spec = str(tiny_dirs["llama"])
    built: list[int] = []
    real = backends.export_npz_bytes
    monkeypatch.setattr(backends, "export_npz_bytes", lambda *a, **k: built.append(1) or real(*a, **k))
    monkeypatch.setenv(settings.NPZ_MB, "0")
    at = _page(spec)
    assert not at.exception
    captions = [c.value for c in at.caption]
    assert any("No .npz download for this trace" in c and "python -m core trace" in c for c in captions), captions
    assert built == []
    monkeypatch.setenv(settings.NPZ_MB, "256")
    at = _page(spec)
    assert not any("No .npz download" in c.value for c in at.caption)
