"""Memory inside its bounds (issue 29, item 3): the .npz download is not kept outside the trace cache's
budget and reuses the layers already derived; the server caps malloc's arenas and hands free pages back
(``core.web.server``). The figures themselves come from tests/benchmarks/bench_sessions.py."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import threading

import numpy as np

import core.backends as backends
from core.engine.types import TOY_ID
from core.web import cache, server
from tests.conftest import ROOT


def test_the_npz_download_is_built_on_demand_and_reuses_cached_layers(monkeypatch):
    assert not hasattr(cache.get_trace_npz, "clear")  # not an st.cache_data entry: nothing kept outside XRAY_CACHE_GB
    prompt = "kqzmwpkqzmw, a prompt for the npz"
    tr = cache.get_trace(TOY_ID, prompt, False)
    kept = cache.get_layer(TOY_ID, prompt, False, 0)  # a page has derived layer 0 already
    real, asked = backends.layer_detail, []

    def counted(loaded, tr_, layer):
        asked.append(layer)
        return real(loaded, tr_, layer)

    monkeypatch.setattr(backends, "layer_detail", counted)
    entries = len(cache.store())
    data = cache.get_trace_npz(TOY_ID, prompt, False)
    assert asked == list(range(1, tr.n_layers))  # layer 0 came from the store, the others were derived once
    assert len(cache.store()) == entries  # and not stored: the file's layers are not kept
    with np.load(io.BytesIO(data)) as z:
        np.testing.assert_array_equal(z["q"][0], kept.q)
        assert z["q"].shape[0] == tr.n_layers


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})


ARENAS = """
    import ctypes, threading
    from core.web import server
    if {cap}:
        server.give_back_freed_memory()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    go = threading.Barrier(12)
    def work():
        go.wait()  # twelve threads at once, as twelve sessions tracing together
        for _ in range(200):
            libc.free(ctypes.c_void_p(libc.malloc(4096)))
    ts = [threading.Thread(target=work) for _ in range(12)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    libc.malloc_stats()  # one "Arena n:" paragraph per arena, on stderr
"""


def test_the_server_caps_malloc_arenas():
    capped = _run(ARENAS.format(cap=True))
    assert capped.returncode == 0, capped.stderr
    n = capped.stderr.count("Arena ")
    assert 1 <= n <= server.ARENAS, capped.stderr
    free = _run(ARENAS.format(cap=False))  # glibc's own default: an arena per busy thread
    assert free.stderr.count("Arena ") > server.ARENAS, free.stderr


def test_trim_hands_back_free_pages_in_the_middle_of_the_heap():
    out = _run("""
        import ctypes
        from core.web import server
        server.give_back_freed_memory()
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc.restype = ctypes.c_void_p
        def rss():
            return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
        blocks = [libc.malloc(200_000) for _ in range(2000)]  # 400 MB in blocks below the mmap threshold: the heap
        for b in blocks:
            ctypes.memset(b, 1, 200_000)
        top = libc.malloc(100)  # something still in use above them: the heap cannot shrink from the top
        ctypes.memset(top, 1, 100)
        full = rss()
        for b in blocks:
            libc.free(ctypes.c_void_p(b))
        kept = rss()
        server.trim()
        print(full, kept, rss())
    """)
    assert out.returncode == 0, out.stderr
    full, kept, trimmed = map(int, out.stdout.split())
    assert kept > full - 100  # freed, yet held by malloc: the memory that "stays"
    assert trimmed < kept - 300  # handed back


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
