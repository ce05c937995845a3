"""Memory inside its bounds (issue 29, item 3): the .npz download is not kept outside the trace cache's
budget and reuses the layers already derived; the server caps malloc's arenas and hands free pages back
(``core.web.server``). The figures themselves come from tests/benchmarks/bench_sessions.py."""

from __future__ import annotations

import io
import threading

import numpy as np

import core.backends as backends
from core.web import cache, server


def _old_npz(loaded, tr) -> bytes:
    """The file as the download built it before it was kept: every layer by ``backends.layer_detail``, nothing stored."""
    return backends.export_npz_bytes(loaded, tr, detail=lambda layer: backends.layer_detail(loaded, tr, layer))


def test_the_npz_download_is_built_from_the_stores_layers_and_kept_under_the_budget(tiny_dirs, monkeypatch):
    assert not hasattr(cache.get_trace_npz, "clear")  # not an st.cache_data entry: nothing kept outside XRAY_CACHE_GB
    spec, prompt = str(tiny_dirs["llama"]), "kqzmwpkqzmw, a prompt for the npz"
    tr = cache.get_trace(spec, prompt, False)
    kept = cache._layer(tr, 0)  # a page has derived layer 0 already
    old = _old_npz(cache.get_model(spec), tr)  # the old route (same derivation: same route → equal bytes)
    real, asked = backends.layer_detail, []

    def counted(loaded, tr_, layer, **kw):
        asked.append(layer)
        return real(loaded, tr_, layer, **kw)

    monkeypatch.setattr(backends, "layer_detail", counted)
    before = cache.store().stats()["bytes"]
    data = cache.get_trace_npz(tr)
    assert data == old
    assert asked == list(range(1, tr.n_layers))  # layer 0 came from the store, the others were derived once
    assert all(cache.has_site(tr, "q", i) for i in range(tr.n_layers))  # and kept there, like a page's
    derived = sum(cache._layer(tr, i).nbytes for i in range(1, tr.n_layers))
    assert ("npz", *tr.key) in cache.store()
    assert cache.store().stats()["bytes"] == before + derived + len(data)  # the file counts in the store's bytes
    assert cache.get_trace_npz(tr) is data and asked == list(range(1, tr.n_layers))  # a second click: the kept file
    with np.load(io.BytesIO(data)) as z:
        np.testing.assert_array_equal(z["q"][0], kept.q)
        assert z["q"].shape[0] == tr.n_layers


def test_a_small_cache_budget_evicts_the_npz_file(tiny_dirs, monkeypatch):
    """Under ``XRAY_CACHE_GB`` the file is evicted like a trace: room for the trace, its layers, the file and one
    more trace, then other prompts' traces push it out; a budget smaller than the file hands it out (the same
    bytes) without keeping it."""
    spec, prompt = str(tiny_dirs["llama"]), "kqzmwpkqzmw, a prompt for the evicted npz"
    loaded = cache.get_model(spec)
    one = backends.trace(loaded, prompt)
    size = len(_old_npz(loaded, one))
    layers = sum(backends.layer_detail(loaded, one, i).nbytes for i in range(one.n_layers))
    monkeypatch.setenv("XRAY_CACHE_GB", str((2 * one.nbytes + layers + size) / 1e9))
    cache.store.clear()
    try:
        tr = cache.get_trace(spec, prompt, False)
        data = cache.get_trace_npz(tr)
        assert len(data) == size and ("npz", *tr.key) in cache.store()  # kept: it fits
        for i in range(100):  # other sessions' prompts, until the file is the least recently used
            cache.get_trace(spec, f"another prompt number {i}", False)
            st = cache.store().stats()
            assert st["bytes"] <= st["max_bytes"], st
            if ("npz", *tr.key) not in cache.store():
                break
        assert ("npz", *tr.key) not in cache.store()  # evicted like the rest
        monkeypatch.setenv("XRAY_CACHE_GB", str(size / 2 / 1e9))
        cache.store.clear()
        tr = cache.get_trace(spec, prompt, False)
        assert cache.get_trace_npz(tr) == data  # bigger than the whole budget: handed out …
        assert ("npz", *tr.key) not in cache.store() and cache.store().stats()["bytes"] <= size / 2  # … not kept
    finally:
        cache.store.clear()


def test_the_launcher_starts_the_trimmer(monkeypatch):
    calls = []
    monkeypatch.setattr(server, "trim", lambda: calls.append(1) or True)
    stop = threading.Event()
    t = server.start_trimming(every_s=0.01, stop=stop)
    assert t.daemon and t.name == "xray-malloc-trim"
    for _ in range(500):
        if calls:
            break
        t.join(0.01)
    stop.set()
    t.join(5)
    assert calls and not t.is_alive()
