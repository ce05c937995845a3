"""Load benchmark: K students at once, each tracing a distinct prompt through nginx, with 1 and with 2 replicas.

    PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_load.py [--quick] [--ks 8,30,60] [--page tour] [--port 8680]

For each number of replicas (1, then 2) the script starts a hall with ``deploy/serve.py`` on 127.0.0.1
(the same launcher, nginx config and sticky cookie as ``make serve``), warms every replica (one trace each,
straight to its port, so no K pays the model's first load), then for each K opens K sessions at the same
instant and prints p50/p95 latency and throughput, and at the end every replica's RSS (now and peak) and
``ratio_replicas_2=<2-replica throughput ÷ 1-replica throughput at the largest K>`` as the last line.

What a simulated session is, and why. A real student is a browser holding one websocket. K headless
Chromium pages at once are too heavy for a 2-core machine at K = 60 (the browsers would take the CPU the
servers are being measured on), and Streamlit's AppTest bypasses the proxy and the server entirely. So each
session here speaks the browser's own protocol, with Streamlit's own protobuf messages, and nothing else:

1. ``GET /`` through nginx, as a first visit (nginx answers with the affinity cookie), then
   ``GET /_stcore/health`` with that cookie, as the frontend does before it connects (Streamlit answers with
   its XSRF cookie);
2. opens ``/_stcore/stream`` through nginx with those cookies, the ``streamlit`` subprotocol and the page's
   Origin, so nginx's sticky hash puts the websocket on the replica the cookie names;
3. sends the BackMsg the frontend sends on load: ``rerun_script`` with the URL's page and query string,
   by default the guided tour at its tokens stage, ``/tour?lang=en&step=1&prompt=<a prompt no one else
   traced>``: one trace of the prompt, drawn as the page a student sees (``--page journey`` opens the
   journey instead, which also runs the generation loop to the end token: several times the work);
4. reads ForwardMsgs until ``script_finished``; a run that drew an exception or did not finish counts as
   a failure (and is reported).

Latency is the time from step 1 to step 4 (what a student waits between opening the link and seeing the
page's last element arrive); it leaves out only the browser's own painting, which costs the student's
machine, not the server. Throughput is the sessions that finished ÷ the time until the last of the K
finished or gave up (``--timeout``, 900 s by default). The browser path itself (rendering, reconnects,
stickiness) is what tests/browser/test_proxy.py checks.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from deploy import serve  # noqa: E402 - the project root first

FINISHED = ForwardMsg.ScriptFinishedStatus.Value("FINISHED_SUCCESSFULLY")
SUBJECTS = ("Ada", "Bashir", "Chen", "Dalia", "Emeka", "Freya", "Goran", "Hana", "Ines", "Jomo")
VERBS = ("counted", "painted", "borrowed", "carried", "measured", "described")
THINGS = ("seven violins", "a quiet river", "twelve lanterns", "the blue kite", "three old maps", "a stone bridge")


def prompt(i: int, salt: str) -> str:
    """A distinct, ordinary sentence (about 15–20 tokens): no trace is served from another session's cache."""
    return (f"In lecture {salt}, {SUBJECTS[i % len(SUBJECTS)]} {VERBS[i % len(VERBS)]} "
            f"{THINGS[(i // 3) % len(THINGS)]} before session {i} ended.")


@dataclass
class Result:
    seconds: float
    ok: bool
    replica: str
    why: str = ""


def _cookies(headers) -> dict[str, str]:
    out = {}
    for v in headers.get_all("Set-Cookie") or []:
        name, _, rest = v.partition("=")
        out[name.strip()] = rest.split(";", 1)[0]
    return out


def _first_visit(base: str) -> tuple[dict[str, str], str]:
    """The page, then the health probe the frontend makes before its websocket (which sets the XSRF cookie),
    the second with the affinity cookie the first one got."""
    cookies: dict[str, str] = {}
    replica = ""
    for path in ("/", "/_stcore/health"):
        req = urllib.request.Request(base + path, headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())})
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
            cookies.update(_cookies(r.headers))
            replica = r.headers.get("X-Replica", replica)
    return cookies, replica


async def session(base: str, params: dict[str, str], timeout: float, page: str = "") -> Result:
    """One student: first visit, websocket, one script run; see the module's docstring."""
    t0 = time.perf_counter()
    try:
        cookies, replica = await asyncio.to_thread(_first_visit, base)
        ws_url = base.replace("http://", "ws://") + "/_stcore/stream"
        xsrf = cookies.get("_streamlit_xsrf", "")
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()), "Origin": base}
        async with websockets.connect(ws_url, subprotocols=["streamlit", xsrf] if xsrf else ["streamlit"],
                                      additional_headers=headers, max_size=None, open_timeout=60) as ws:
            replica = ws.response.headers.get("X-Replica", replica)
            msg = BackMsg()
            msg.rerun_script.query_string = urllib.parse.urlencode(params)
            msg.rerun_script.page_name = "" if page == "journey" else page  # the URL's page, as the frontend sends it ("": /)
            await ws.send(msg.SerializeToString())
            deadline = t0 + timeout
            while True:
                raw = await asyncio.wait_for(ws.recv(), timeout=max(0.1, deadline - time.perf_counter()))
                fwd = ForwardMsg()
                fwd.ParseFromString(raw)
                kind = fwd.WhichOneof("type")
                if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element" \
                        and fwd.delta.new_element.WhichOneof("type") == "exception":
                    return Result(time.perf_counter() - t0, False, replica, fwd.delta.new_element.exception.message[:200])
                if kind == "script_finished":
                    if fwd.script_finished == FINISHED:
                        return Result(time.perf_counter() - t0, True, replica)
                    return Result(time.perf_counter() - t0, False, replica, f"script_finished={fwd.script_finished}")
    except (OSError, TimeoutError, websockets.WebSocketException) as e:
        return Result(time.perf_counter() - t0, False, "", f"{type(e).__name__}: {e}")


async def burst(base: str, k: int, salt: str, timeout: float, page: str) -> tuple[list[Result], float]:
    t0 = time.perf_counter()
    results = await asyncio.gather(*(session(base, query(page, prompt(i, salt)), timeout, page) for i in range(k)))
    return list(results), time.perf_counter() - t0


def query(page: str, text: str) -> dict[str, str]:
    """The link a student opens: English, the prompt (and the tour's tokens stage)."""
    return {"lang": "en", "prompt": text, **({"step": "1"} if page == "tour" else {})}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


class Hall:
    """``deploy/serve.py`` in the background, stopped with Ctrl-C's signal."""

    LINE = re.compile(r"replica (\d+)/\d+\s+http://127\.0\.0\.1:(\d+)\s+pid (\d+)")

    def __init__(self, replicas: int, port: int, log: Path):
        self.log_path = log
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "deploy.serve", "--replicas", str(replicas), "--port", str(port),
             "--host", "127.0.0.1", "--replica-port", str(port + 1)],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.base = f"http://127.0.0.1:{port}"
        self.pids: dict[str, int] = {}

    def wait(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while "serve: serving" not in self.log_path.read_text():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the hall did not start; see {self.log_path}")
            time.sleep(0.5)
        for _n, port, pid in self.LINE.findall(self.log_path.read_text()):
            self.pids[f"127.0.0.1:{port}"] = int(pid)

    def rss(self) -> dict[str, tuple[float, float]]:
        """{replica address: (RSS now, peak RSS) in MiB}."""
        out = {}
        for addr, pid in sorted(self.pids.items()):
            try:
                now = psutil.Process(pid).memory_info().rss / 2**20
                peak = next(int(line.split()[1]) / 1024 for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                            if line.startswith("VmHWM:"))
            except (psutil.Error, OSError, StopIteration):
                continue
            out[addr] = (now, peak)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


async def warm(hall: Hall, timeout: float, page: str) -> None:
    """One trace on every replica, straight to its port: the model's first load is not part of any K."""
    results = await asyncio.gather(*(session(f"http://{addr}", query(page, f"Warm-up of {addr}."), timeout, page)
                                     for addr in hall.pids))
    for r in results:
        if not r.ok:
            raise RuntimeError(f"the warm-up run failed: {r.why}")


def run_halls(a: argparse.Namespace, ks: list[int], out: Path) -> dict[int, dict[int, float]]:
    """The bursts, with 1 and then 2 replicas; returns the throughput by K and by number of replicas."""
    throughput: dict[int, dict[int, float]] = {}
    for replicas in (1, 2):
        hall = Hall(replicas, a.port, out / f"bench_load_{replicas}.log")
        try:
            hall.wait(300)
            asyncio.run(warm(hall, a.timeout, a.page))
            print(f"== {replicas} replica(s) behind nginx at {hall.base}, page /{a.page} ==", flush=True)
            for k in ks:
                results, wall = asyncio.run(burst(hall.base, k, f"{replicas}r{k}k{time.time():.0f}", a.timeout, a.page))
                ok = [r.seconds for r in results if r.ok]
                bad = [r for r in results if not r.ok]
                per = {addr: sum(1 for r in results if r.replica.endswith(addr)) for addr in hall.pids}
                throughput.setdefault(k, {})[replicas] = len(ok) / wall
                print(f"replicas={replicas} K={k:3d}  p50={pct(ok, 0.5):6.2f} s  p95={pct(ok, 0.95):6.2f} s  "
                      f"max={max(ok, default=float('nan')):6.2f} s  throughput={len(ok) / wall:5.2f} sessions/s  "
                      f"ok={len(ok)}/{k}  per-replica={per}", flush=True)
                for r in bad[:3]:
                    print(f"   failed after {r.seconds:.1f} s: {r.why}", flush=True)
            for addr, (now, peak) in hall.rss().items():
                print(f"rss_replica[{addr}] replicas={replicas}: {now:.0f} MiB now, {peak:.0f} MiB peak", flush=True)
        finally:
            hall.stop()
    return throughput


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="K = 8 and 16 only (a few minutes on a quiet machine)")
    ap.add_argument("--ks", default=None, help="comma-separated K values (default 8,30,60; --quick: 8,16)")
    ap.add_argument("--port", type=int, default=8680, help="nginx's port; the replicas take the next ones")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one session may wait")
    ap.add_argument("--page", default="tour",
                    help="the page each session opens: a page stem of core/web/nav.py (default 'tour', at its tokens "
                         "stage; 'journey' is the default page, /)")
    a = ap.parse_args()
    ks = [int(k) for k in (a.ks or ("8,16" if a.quick else "8,30,60")).split(",")]
    if serve.find_nginx() is None:
        print("bench_load: nginx is not installed (make serve / make test install it)", file=sys.stderr)
        return 2
    out = ROOT / "out"
    out.mkdir(exist_ok=True)
    try:
        throughput = run_halls(a, ks, out)
    except RuntimeError as e:  # a hall that did not start, a warm-up that failed: one sentence (the log is named)
        print(f"bench_load: {e}", file=sys.stderr)
        return 1
    for k in ks:
        t = throughput.get(k, {})
        if t.get(1) and 2 in t:
            print(f"ratio_replicas_2_K{k}={t[2] / t[1]:.2f}")
    t = throughput.get(ks[-1], {})
    print(f"ratio_replicas_2={t[2] / t[1]:.2f}" if t.get(1) and 2 in t else "ratio_replicas_2=nan")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
