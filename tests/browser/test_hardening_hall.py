"""`make serve` hardening (issue 39): a real nginx in front of stand-in replicas (an HTTP server answering the
health check, as Streamlit does), the launcher's own watch loop in this process.

* nginx refuses Streamlit's upload route and any request body over its small limit (the app has no uploader);
* nginx and every replica dying together: nginx comes back (its readiness is its own probe, not a replica's)
  and the replicas are restarted — the hall does not stop;
* a replica that runs but answers nothing (SIGSTOP: frozen) is killed and restarted;
* kill -9 of the launcher: its replicas die with it, even one that ignores SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest
from helpers.hall import FAKE_REPLICA, free_block, light_hall, until

from conftest import ROOT
from deploy import serve

NGINX = serve.find_nginx()
needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx is not installed (`make test` installs nginx-light)")



def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def hall(monkeypatch):
    """Two stand-in replicas behind a real nginx, the launcher's watch loop in this process (helpers.hall)."""
    with light_hall(monkeypatch, (8900, 9000)) as h:
        yield h


def _status(url: str, method: str = "GET", body: bytes | None = None) -> int:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@needs_nginx
def test_nginx_refuses_uploads_and_big_bodies(hall):
    launcher, _ = hall
    base = f"http://127.0.0.1:{launcher.plan.port}"
    assert _status(base + "/_stcore/health") == 200
    for method in ("PUT", "POST"):
        assert _status(base + "/_stcore/upload_file/some-session/some-file", method, b"x" * 1000) == 403
    assert _status(base + "/", "POST", b"x" * (1 << 20)) == 413  # 1 MB: over client_max_body_size, never passed on


@needs_nginx
def test_nginx_and_every_replica_dying_together_come_back(hall):
    launcher, log = hall
    master = launcher.nginx.pid
    os.killpg(master, signal.SIGKILL)  # nginx's whole group …
    for r in launcher.replicas:  # … and both replicas, at once
        r.proc.kill()
    until(log, "nginx restarted (attempt 1 of 3)", timeout=40)
    until(log, "answers /_stcore/health again: back in rotation", count=2, timeout=40)
    assert "code" not in launcher.result  # the hall goes on
    deadline = time.time() + 15  # nginx re-reads its config (SIGHUP) with the replicas back in
    while _status(f"http://127.0.0.1:{launcher.plan.port}/_stcore/health") != 200:
        assert time.time() < deadline, log()[-3000:]
        time.sleep(0.3)


@needs_nginx
def test_a_frozen_replica_is_killed_and_restarted(hall, monkeypatch):
    launcher, log = hall
    monkeypatch.setattr(serve, "FAILS_TO_RESTART", 4)
    r1 = launcher.replicas[0]
    old = r1.proc.pid
    os.kill(old, signal.SIGSTOP)  # running, holding its port, answering nothing
    try:
        out = until(log, "(frozen): killed", timeout=90)
        until(log, "replica 1: restarted (1 of at most 3", timeout=30)
        until(log, "answers /_stcore/health again: back in rotation", timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old, signal.SIGCONT)
    assert "replica 1" in out and r1.proc.pid != old and not _alive(old)
    assert "code" not in launcher.result


DRIVER = """
import sys, time
from deploy import serve
fake, port = sys.argv[1], int(sys.argv[2])
launcher = serve.Launcher(serve.Plan(2, "127.0.0.1", port, (port + 1, port + 2), 30.0, 1), "nginx")
launcher.replica_cmd = lambda p: [sys.executable, "-c", fake, str(p), "ignore-sigterm"]
launcher.start_replicas()
launcher.wait_healthy()
print("PIDS", *(r.proc.pid for r in launcher.replicas), flush=True)
time.sleep(600)
"""


def test_replicas_die_with_a_launcher_killed_outright():
    port = free_block(9000, 9100)
    drv = subprocess.Popen([sys.executable, "-c", DRIVER, FAKE_REPLICA, str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    pids: list[int] = []
    try:
        line = ""
        while not line.startswith("PIDS"):  # the launcher's own lines first
            line = drv.stdout.readline()
            assert line, "the launcher stopped before its replicas answered"
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        drv.kill()  # kill -9: no handler, no stop()
        drv.wait(timeout=10)
        deadline = time.time() + 10
        while any(_alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.1)
        assert not [p for p in pids if _alive(p)], "a replica outlived its launcher"
        assert serve.port_free("127.0.0.1", port + 1) and serve.port_free("127.0.0.1", port + 2)
    finally:
        drv.kill()
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
