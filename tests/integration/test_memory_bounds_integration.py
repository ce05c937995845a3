"""Memory inside its bounds (issue 29, item 3): the .npz download is not kept outside the trace cache's
budget and reuses the layers already derived; the server caps malloc's arenas and hands free pages back
(``core.web.server``). The figures themselves come from tests/benchmarks/bench_sessions.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from core.web import server
from tests.conftest import ROOT


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
        # something still in use above them, so the heap cannot shrink from the top: a block of their own size (a
        # small one may be served from a free fragment below them, left by the imports, and then the heap shrinks)
        top = libc.malloc(200_000)
        ctypes.memset(top, 1, 200_000)
        assert top > max(blocks), "the sentinel is not above the blocks"
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
