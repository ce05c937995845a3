"""The light lecture hall shared by the launcher's browser-tier tests (tests/browser/test_proxy.py,
test_hardening_hall.py): deploy/serve.py's Launcher with its watch loop in this process, two stand-in replicas
behind a real nginx."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from deploy import serve

NGINX = serve.find_nginx()

# A replica in 50 ms instead of 30 s: an HTTP server on its port that answers every GET with "ok" (the health
# check, as Streamlit does), every other method 405; with a second argument it ignores SIGTERM (a replica whose
# shutdown does not happen on SIGTERM).
FAKE_REPLICA = """
import http.server, signal, sys
if len(sys.argv) > 2:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_block(start: int, stop: int, n: int = 3) -> int:
    """The first port p in [start, stop) with p … p+n−1 all free on 127.0.0.1."""
    for p in range(start, stop):
        if all(serve.port_free("127.0.0.1", q) for q in range(p, p + n)):
            return p
    raise RuntimeError(f"no {n} free ports in {start}..{stop}")


def until(log: Callable[[], str], text: str, timeout: float = 30, count: int = 1) -> str:
    """The log once ``text`` stands in it ``count`` times (fails after ``timeout`` seconds, showing its tail)."""
    deadline = time.time() + timeout
    while log().count(text) < count:
        assert time.time() < deadline, f"no {text!r} ×{count} within {timeout:.0f} s:\n{log()[-3000:]}"
        time.sleep(0.1)
    return log()


@contextlib.contextmanager
def light_hall(monkeypatch, ports: tuple[int, int]) -> Iterator[tuple[serve.Launcher, Callable[[], str]]]:
    """A Launcher of two stand-in replicas behind a real nginx (its port block in ``ports``), its watch loop in a
    thread (checks every 0.2 s). Yields (launcher, read_log); stops everything on the way out."""
    if NGINX is None:
        pytest.skip("nginx is not installed (`make test` installs nginx-light)")
    monkeypatch.setattr(serve, "CHECK_EVERY_S", 0.2)
    monkeypatch.setattr(serve, "PORT_FREE_S", 3.0)
    port = free_block(*ports)
    launcher = serve.Launcher(serve.Plan(2, "127.0.0.1", port, (port + 1, port + 2), 30.0, 1), NGINX)
    launcher.replica_cmd = lambda p: [sys.executable, "-c", FAKE_REPLICA, str(p)]
    seen: list[str] = []  # the launcher's lines (it says them from the watching thread)
    monkeypatch.setattr(serve, "say", lambda msg: seen.append(f"serve: {msg}\n"))

    def log() -> str:
        return "".join(list(seen))

    result: dict[str, int] = {}
    watcher = None
    try:
        launcher.start_replicas()
        launcher.wait_healthy()
        launcher.start_nginx()
        watcher = threading.Thread(target=lambda: result.setdefault("code", launcher.watch()), daemon=True)
        watcher.start()
        launcher.result = result
        launcher.watcher = watcher
        yield launcher, log
    finally:
        launcher.stopping.set()
        if watcher is not None:
            watcher.join(timeout=30)
        launcher.stop()
