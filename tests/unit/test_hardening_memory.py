"""Memory returns after a burst (issue 39): a cached trace nobody has read for ``XRAY_CACHE_IDLE_S`` seconds is
dropped by the server's trimming thread, so the traces of a burst of sessions do not hold the server's memory
once the burst is over (tests/benchmarks/bench_sessions.py prints the figures)."""

from __future__ import annotations

import threading

import numpy as np

from core.common import memo, settings
from core.web import server


def test_values_not_read_for_the_idle_time_are_dropped():
    now = [0.0]
    c = memo.ByteLRU(1 << 20, clock=lambda: now[0])
    c.put("old", np.zeros(1000, np.uint8))
    now[0] = 50.0
    c.put("young", np.zeros(1000, np.uint8))
    now[0] = 90.0
    assert c.get("old", lambda: None) is not None  # read again: young again
    now[0] = 160.0
    assert c.expire(100.0) == 1  # "young" was last used at 50
    assert "young" not in c and "old" in c and c.total == 1000
    now[0] = 200.0
    assert c.expire(100.0) == 1 and c.total == 0 and len(c) == 0


def test_the_trimming_thread_expires_every_live_cache(monkeypatch):
    c = memo.ByteLRU(1 << 20)
    c.put("trace", np.zeros(4096, np.uint8))
    monkeypatch.setenv(settings.CACHE_IDLE_S, "1")
    assert settings.get().cache_idle_s == 1.0
    stop = threading.Event()
    t = server.start_trimming(every_s=0.2, stop=stop)
    try:
        deadline = threading.Event()
        for _ in range(50):
            if "trace" not in c:
                break
            deadline.wait(0.1)
    finally:
        stop.set()
        t.join(2)
    assert "trace" not in c and c.total == 0


def test_the_idle_setting_reads_ascii_digits_only(monkeypatch):
    default = settings.CACHE_IDLE_S_DEFAULT
    for raw, want in (("", default), ("30", 30), ("0", default), ("٣", default), ("-5", default)):
        assert settings.Settings.from_env({settings.CACHE_IDLE_S: raw}).cache_idle_s == want, raw
