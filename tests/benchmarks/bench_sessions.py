"""Benchmark: the server's memory around a burst of concurrent long-prompt sessions (issues 29 and 39).

    PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_sessions.py [--sessions 20] [--tokens 1000]
        [--page journey] [--ttl 30] [--idle 120] [--port 8720]

Starts the app (``python -m core.web.server``, what ``make run`` starts, so with its memory settings) on
the embedded model, warms it with one short trace (the model's first load is part of the baseline, as on a
server that has served one student), reads the process's resident memory (VmRSS from /proc): **before**.
Then opens ``--sessions`` sessions at the same instant, each speaking the browser's own websocket protocol
(``bench_load.session``: Streamlit's protobuf messages, the same run a browser's first visit asks for), each
with its own prompt of about ``--tokens`` tokens (a slice of the sidebar's long English document, starting at
a different place for every session, so no session finds another's trace cached). RSS is sampled every
0.2 s: **peak**. When every session has finished and closed its websocket, the script waits for Streamlit to
drop the disconnected sessions (``server.disconnectedSessionTTL``, set with ``--ttl``, plus the cleanup's
own period) and the server to drop the traces nobody reads any more (``XRAY_CACHE_IDLE_S``, set with
``--idle``, plus two of the trimming thread's periods), and reads **after**.

The target (issue 39): after ≤ before × 1.1 — the memory returns within 10 % of its idle level. Last lines:
the figures, ``ratio_after_before``, the target and ``holds=yes|no``. Sessions run one script each at a time; on a 2-core machine 20 sessions of ~1,000 tokens
take a few minutes (traces queue on the model's lock).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
import bench_load  # noqa: E402 - the websocket session, next to this file

from core.common import settings  # noqa: E402
from core.engine import budget  # noqa: E402
from core.web import server  # noqa: E402
from tests import browser_helpers  # noqa: E402

MIB = 2**20
CHARS_PER_TOKEN = 4.6  # the long English document: 14,668 characters, ~3,200 tokens


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def prompts(n: int, tokens: int) -> list[str]:
    """``n`` distinct prompts of about ``tokens`` tokens: windows of the long document, each from its own
    offset (wrapping around), with the session's number in front."""
    doc = " ".join((ROOT / "assets" / "long" / "en.txt").read_text(encoding="utf-8").split())
    size = int(tokens * CHARS_PER_TOKEN)
    text = (doc + " ") * (1 + size // len(doc) + 1)
    step = max(1, len(doc) // max(1, n))
    return [f"Session {i}: " + text[i * step: i * step + size] for i in range(n)]


class Sampler:
    """The process's RSS every ``period`` seconds, in a thread: the peak since ``reset``."""

    def __init__(self, pid: int, period: float = 0.2):
        self.pid, self.period, self.peak = pid, period, 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except OSError:
                return
            time.sleep(self.period)

    def reset(self) -> None:
        self.peak = 0.0

    def stop(self) -> None:
        self._stop.set()


async def _burst(base: str, texts: list[str], page: str, timeout: float) -> list[bench_load.Result]:
    params = [{"lang": "en", "prompt": t, **({"step": "1"} if page == "tour" else {})} for t in texts]
    return list(await asyncio.gather(*(bench_load.session(base, p, timeout, page) for p in params)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=20, help="sessions opened at the same instant")
    ap.add_argument("--tokens", type=int, default=1000, help="about how many tokens each session's prompt has")
    ap.add_argument("--page", default="journey", help="the page each session opens (a page stem; journey is /)")
    ap.add_argument("--ttl", type=int, default=30, help="server.disconnectedSessionTTL for this run, in seconds")
    ap.add_argument("--idle", type=int, default=None,
                    help="XRAY_CACHE_IDLE_S for this run (default: the server's own, core.common.settings.CACHE_IDLE_S_DEFAULT)")
    ap.add_argument("--settle", type=float, default=None,
                    help="seconds to wait after the TTL before 'after' (default: the idle time + two trimming periods + 5)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one session may wait")
    ap.add_argument("--port", type=int, default=8720)
    ap.add_argument("--log", default=None, help="the server's output goes here (default: out/bench_sessions.log)")
    a = ap.parse_args()
    if a.idle is not None:
        os.environ[settings.CACHE_IDLE_S] = str(a.idle)  # the server started below inherits it
    settings.reload()
    idle = settings.get().cache_idle_s
    settle = a.settle if a.settle is not None else idle + 2 * server.TRIM_S + 5
    cache_mib = budget.cache_bytes() / MIB
    log_path = Path(a.log) if a.log else ROOT / "out" / "bench_sessions.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    texts = prompts(a.sessions, a.tokens)
    print(f"{a.sessions} sessions on /{a.page}, prompts of ~{a.tokens} tokens ({len(texts[0]):,} characters), "
          f"XRAY_CACHE_GB={os.environ.get('XRAY_CACHE_GB', 'unset')} ({cache_mib:,.0f} MiB), "
          f"MALLOC_ARENA_MAX={os.environ.get('MALLOC_ARENA_MAX', 'unset')} in the launching shell, "
          f"{settings.CACHE_IDLE_S}={idle:.0f}", flush=True)
    with log_path.open("w") as log, browser_helpers.streamlit_server(
            a.port, ("--server.disconnectedSessionTTL", str(a.ttl)), log=log, start_s=300) as app:
        pid = app.proc.pid
        print(f"server started: {rss_mib(pid):,.0f} MiB", flush=True)
        warm = asyncio.run(_burst(app.base, ["Warm-up: the model loads once."], a.page, a.timeout))
        if not warm[0].ok:
            print(f"bench_sessions: the warm-up run failed: {warm[0].why}", file=sys.stderr)
            return 1
        time.sleep(a.ttl + settle)  # the warm-up session and its trace gone too: the baseline holds neither
        before = rss_mib(pid)
        print(f"before (model loaded, one short trace done, its session gone): {before:,.0f} MiB", flush=True)
        sampler = Sampler(pid)
        t0 = time.perf_counter()
        results = asyncio.run(_burst(app.base, texts, a.page, a.timeout))
        wall = time.perf_counter() - t0
        ok = [r.seconds for r in results if r.ok]
        print(f"{len(ok)}/{a.sessions} sessions finished in {wall:.0f} s "
              f"(p50 {bench_load.pct(ok, 0.5):.1f} s, max {max(ok, default=float('nan')):.1f} s)", flush=True)
        for r in [r for r in results if not r.ok][:3]:
            print(f"   failed after {r.seconds:.1f} s: {r.why}", flush=True)
        closed = rss_mib(pid)
        print(f"every session done and closed: {closed:,.0f} MiB", flush=True)
        time.sleep(a.ttl + settle)
        after = rss_mib(pid)
        sampler.stop()
        peak = max(sampler.peak, closed, after)
        hwm = rss_mib(pid, "VmHWM")
    target = before * 1.1
    print(f"rss_before_mib={before:.0f}")
    print(f"rss_peak_mib={peak:.0f} (VmHWM {hwm:.0f})")
    print(f"rss_after_mib={after:.0f} ({a.ttl + settle:.0f} s after the last session closed)")
    print(f"ratio_peak_before={peak / before:.2f}")
    print(f"ratio_after_before={after / before:.3f}")
    print(f"target_mib={target:.0f} (before × 1.1)")
    print(f"holds={'yes' if after <= target else 'no'}")
    return 0 if len(ok) == a.sessions else 1


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except (RuntimeError, subprocess.SubprocessError) as e:
        print(f"bench_sessions: {e}", file=sys.stderr)
        raise SystemExit(1) from None
