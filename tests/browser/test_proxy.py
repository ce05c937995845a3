"""Serving a lecture hall: `make serve` (deploy/serve.py) — two app processes behind nginx, all on 127.0.0.1.

* the launcher refuses bad arguments with one sentence (no nginx needed), and its config template renders
  to a file nginx accepts;
* through the proxy: a health probe is answered; every page in core/web/nav.py renders;
* two browsers land on, and stay on, their own replicas across reruns, reloads and page changes; a fresh
  browser's page and websocket land on the same replica;
* a session's trace, generation stepper and URL state survive 20 interactions on one websocket;
* stopping one replica gives its students a clear notice, and they continue on the other replica with their
  view restored from the URL, while the other replica's students notice nothing;
* a replica that stops is started again and comes back into rotation (bounded: one that keeps dying is left
  stopped); kill -9 of nginx's master kills its orphaned worker and starts nginx again, keeping the replicas
  (bounded: an nginx that cannot come back, or keeps dying, stops the hall) — on a light hall of stand-in
  replicas in this process, and once on the real hall;
* Ctrl-C (SIGINT to the launcher) stops nginx and every replica: no process is left, the ports are free.

The hall tests run in file order on one hall (N = 2) and need nginx (`make test` installs nginx-light) and,
for the browser, Debian's Chromium; without them they are skipped with the reason. Each wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from browser_helpers import CHROMIUM, Watch, chromium, painted, settle, url_path
from helpers import hall as halls

from conftest import ROOT
from core.common import i18n
from core.web.nav import STEMS
from deploy import serve

NGINX = serve.find_nginx()
needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx is not installed (`make test` installs nginx-light)")
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable installed (browser tests need one)")
LOGS = ROOT / "screenshots"
START_S = 360  # two replicas importing torch on a busy 2-core machine


def _run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deploy.serve", *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env})


# --- the launcher, without starting anything -----------------------------------------------------------

@pytest.mark.parametrize(("args", "says"), [
    (["--replicas", "0"], "REPLICAS must be from 1 to 64, not 0"),
    (["--threads", "0"], "THREADS must be from 1 to 256, not 0"),
    (["--replicas", "65"], "REPLICAS must be from 1 to 64, not 65"),
    (["--replicas", "two"], "REPLICAS must be a whole number from 1 to 64, not 'two'"),
    (["--port", "0"], "a port must be from 1 to 65535, not 0"),
    (["--port", "65536"], "a port must be from 1 to 65535, not 65536"),
    (["--port", "http"], "a port must be a whole number from 1 to 65535, not 'http'"),
])
def test_launcher_refuses_bad_arguments_with_a_sentence(args, says):
    out = _run_serve(*args)
    assert out.returncode == 2, out
    assert says in out.stderr and "error:" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_launcher_refuses_a_busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = _run_serve("--host", "127.0.0.1", "--port", str(port), "--replicas", "1")
    assert out.returncode == 2
    assert f"port {port} is already in use" in out.stderr and "Traceback" not in out.stderr


@needs_nginx
def test_launcher_checks_the_model_setting_before_starting_anything():
    """XRAY_MODELS applies to every replica, so it is checked once, first: one sentence, nothing started."""
    out = _run_serve("--host", "127.0.0.1", "--port", str(halls.free_block(8670, 8690, 1)), "--replicas", "1",
                     env={"XRAY_MODELS": "bad id=/nowhere"})
    assert out.returncode == 2
    assert "XRAY_MODELS entry 1" in out.stderr and "Traceback" not in out.stderr + out.stdout
    assert "replica 1" not in out.stdout


def test_replica_number_comes_from_the_launcher(monkeypatch):
    from core.web import replica

    monkeypatch.delenv(serve.ENV_REPLICA, raising=False)
    assert replica.number() is None  # `make run`: one process, no replica
    monkeypatch.setenv(serve.ENV_REPLICA, "2")
    monkeypatch.setenv(serve.ENV_REPLICAS, "3")
    assert replica.number() == (2, 3)
    monkeypatch.setenv(serve.ENV_REPLICA, "4")
    assert replica.number() is None


def test_default_replicas_is_half_the_cores(monkeypatch):
    assert serve.cores() == len(os.sched_getaffinity(0))  # the cores this process may use, not the machine's
    for cores, replicas in ((1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (16, 8)):
        monkeypatch.setattr(serve, "cores", lambda n=cores: n)
        assert serve.default_replicas() == replicas, cores


def test_each_replica_gets_its_share_of_the_cores_for_torch(monkeypatch):
    """N replicas × torch's one-thread-per-core would oversubscribe the cores: each gets cores ÷ N."""
    monkeypatch.setattr(serve, "cores", lambda: 16)
    assert [serve.default_threads(n) for n in (1, 2, 3, 8, 16, 40)] == [16, 8, 5, 2, 1, 1]
    port = str(halls.free_block(8700, 8800, 4))
    assert serve.plan(["--replicas", "2", "--port", port, "--host", "127.0.0.1"]).threads == 8
    assert serve.plan(["--replicas", "2", "--threads", "3", "--port", port, "--host", "127.0.0.1"]).threads == 3
    # the variable the launcher sets is the one torch reads (checked on torch itself, in a fresh process)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "1", out.stderr


@needs_nginx
def test_template_renders_a_config_nginx_accepts(tmp_path):
    text = serve.render(serve.TEMPLATE.read_text(), listen="127.0.0.1:8699", ports=[8697, 8698], prefix=tmp_path,
                        down=frozenset({8698}))
    assert not re.search(r"\{\{[A-Z]+\}\}", text) and "daemon off;" in text
    assert "server 127.0.0.1:8697 max_fails=1 fail_timeout=10s;" in text
    assert "server 127.0.0.1:8698 max_fails=1 fail_timeout=10s down;" in text
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    out = subprocess.run([NGINX, "-t", "-p", f"{tmp_path}/", "-c", str(conf), "-e", "stderr"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert not list(Path("/tmp").glob("nginx.pid")), "nginx wrote outside its prefix"


# --- a light hall: the launcher's watch loop in this process, stand-in replicas ---------------------------

@pytest.fixture
def light_hall(monkeypatch):
    """Two stand-in replicas behind a real nginx, the launcher's watch loop in this process (helpers.hall)."""
    with halls.light_hall(monkeypatch, (8800, 8900)) as h:
        yield h


@needs_nginx
def test_light_nginx_killed_is_restarted_with_its_workers_gone(light_hall):
    launcher, log = light_hall
    master = launcher.nginx.pid
    workers = [c.pid for c in psutil.Process(master).children()]
    replicas = [r.proc.pid for r in launcher.replicas]
    assert workers, "nginx has no worker"
    os.kill(master, signal.SIGKILL)  # the master alone: its worker is orphaned, still holding the port
    halls.until(log, "nginx restarted (attempt 1 of 3)")
    assert not [w for w in workers if _alive(w)]
    assert launcher.nginx.pid != master and launcher.nginx.poll() is None
    assert [r.proc.pid for r in launcher.replicas] == replicas  # the same replicas, never stopped
    assert _get(f"http://127.0.0.1:{launcher.plan.port}/_stcore/health")[1] == "ok"
    assert "code" not in launcher.result  # still watching


@needs_nginx
def test_light_nginx_that_cannot_come_back_stops_the_hall(light_hall, monkeypatch):
    launcher, log = light_hall

    def refused():
        raise serve.UsageError("nginx stopped at once (exit code 1)")

    monkeypatch.setattr(launcher, "start_nginx", refused)
    workers = [c.pid for c in psutil.Process(launcher.nginx.pid).children()]
    os.kill(launcher.nginx.pid, signal.SIGKILL)
    out = halls.until(log, "nginx could not be restarted after 3 attempts", timeout=60)
    assert out.count("nginx did not come back") == 3
    launcher.watcher.join(timeout=10)
    assert launcher.result.get("code") == 1
    assert not [w for w in workers if _alive(w)]
    launcher.stop()
    assert "nothing left running (ports free)" in log()
    assert serve.port_free("127.0.0.1", launcher.plan.port)


@needs_nginx
def test_light_nginx_restarts_are_bounded(light_hall, monkeypatch):
    """nginx that keeps dying is restarted RESTARTS times within the window, then the hall stops."""
    launcher, log = light_hall
    for n in range(1, serve.RESTARTS + 1):
        os.kill(launcher.nginx.pid, signal.SIGKILL)
        halls.until(log, "nginx restarted (attempt 1 of 3)", count=n)
    os.kill(launcher.nginx.pid, signal.SIGKILL)
    halls.until(log, f"nginx stopped again after {serve.RESTARTS} restarts")
    launcher.watcher.join(timeout=10)
    assert launcher.result.get("code") == 1


@needs_nginx
def test_light_a_replica_that_dies_is_restarted_and_bounded(light_hall):
    launcher, log = light_hall
    r1 = launcher.replicas[0]
    old = r1.proc.pid
    r1.proc.kill()
    out = halls.until(log, "answers /_stcore/health again: back in rotation")
    assert "replica 1: restarted (1 of at most 3" in out
    assert r1.proc.pid != old and r1.up and not r1.exited
    assert " down;" not in (launcher.prefix / "nginx.conf").read_text()
    # a replica that cannot start any more: restarted while the limit allows, then left stopped, the hall serving on
    launcher.replica_cmd = lambda p: [sys.executable, "-c", "raise SystemExit(3)"]
    r1.proc.kill()
    halls.until(log, "replica 1 stopped again after 3 restarts")
    assert r1.exited and not r1.up and log().count("replica 1: restarted") == 3
    assert f"server 127.0.0.1:{r1.port} max_fails=1 fail_timeout=10s down;" in (launcher.prefix / "nginx.conf").read_text()
    assert "code" not in launcher.result
    assert _get(f"http://127.0.0.1:{launcher.plan.port}/_stcore/health")[1] == "ok"


# --- one hall of two replicas behind nginx -------------------------------------------------------------

@dataclass
class Hall:
    proc: subprocess.Popen
    base: str
    log: Path
    replicas: dict[str, int] = field(default_factory=dict)  # "127.0.0.1:port" → pid
    prefix: Path | None = None
    tree: list[int] = field(default_factory=list)  # every pid the launcher started (nginx's worker included)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def other(self, addr: str) -> str:
        return next(a for a in self.replicas if a != addr)

    def number(self, addr: str) -> int:
        return sorted(self.replicas, key=lambda a: int(a.rsplit(":", 1)[1])).index(addr) + 1

    def stop(self, timeout: float = 60) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
        return self.proc.poll()

    def kill_everything(self) -> None:
        """Last resort, only for what this test started: the launcher's own process group."""
        for pid in [self.proc.pid, *self.tree]:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


@pytest.fixture(scope="module")
def hall():
    if NGINX is None:
        pytest.skip("nginx is not installed (`make test` installs nginx-light)")
    port = halls.free_block(8640, 8670)
    LOGS.mkdir(exist_ok=True)
    log = LOGS / "proxy.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deploy.serve", "--replicas", "2", "--port", str(port), "--host", "127.0.0.1",
             "--replica-port", str(port + 1)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    h = Hall(proc, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.time() + START_S
        while "serve: serving" not in h.text():
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the hall did not start (exit {proc.poll()}):\n{h.text()[-3000:]}")
            time.sleep(0.5)
        for port_s, pid in re.findall(r"replica \d+/2\s+http://127\.0\.0\.1:(\d+)\s+pid (\d+)", h.text()):
            h.replicas[f"127.0.0.1:{port_s}"] = int(pid)
        h.prefix = Path(re.search(r"config and logs: (\S+)\)", h.text()).group(1))
        h.tree = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(h.replicas) == 2, h.text()
        yield h
    finally:
        if h.stop() is None:
            h.kill_everything()


def _get(url: str, cookie: str | None = None) -> tuple[int, str, dict[str, str], list[str]]:
    req = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read().decode(), {k.lower(): v for k, v in r.headers.items()}, r.headers.get_all("Set-Cookie") or []


def affinity_keys(h: Hall) -> dict[str, str]:
    """An affinity cookie value for each replica, found by asking nginx (its hash decides, not this test)."""
    keys: dict[str, str] = {}
    for i in range(200):
        key = f"test-student-{i}"
        _, _, headers, _ = _get(h.base + "/_stcore/health", f"xray_affinity={key}")
        keys.setdefault(headers["x-replica"], key)
        if len(keys) == len(h.replicas):
            return keys
    raise AssertionError(f"200 keys all landed on {list(keys)}")


@needs_nginx
def test_proxy_answers_a_health_probe(hall):
    status, body, headers, cookies = _get(hall.base + "/_stcore/health")
    assert status == 200 and body == "ok"
    threads = str(serve.default_threads(2))
    for pid in hall.replicas.values():  # each replica was started with its share of the cores for torch
        assert psutil.Process(pid).environ().get("OMP_NUM_THREADS") == threads
    assert f"{threads} torch thread" in hall.text()
    assert "Uvicorn server started" not in hall.text() and "Local URL" not in hall.text()  # private addresses: not shown
    assert headers["x-replica"] in hall.replicas
    key = next(c for c in cookies if c.startswith("xray_affinity=")).split(";")[0].split("=", 1)[1]
    # with its cookie, a browser always reaches the same replica; and it is not handed a new cookie
    for _ in range(5):
        _, _, again, cookies2 = _get(hall.base + "/_stcore/health", f"xray_affinity={key}")
        assert again["x-replica"] == headers["x-replica"]
        assert not any(c.startswith("xray_affinity=") for c in cookies2)
    assert _get(hall.base + "/nginx-health")[1].strip() == "ok"  # nginx's own liveness, no replica involved
    # a body under nginx's 16 KB cap is passed on to a replica (whatever the replica answers, the answer is the
    # replica's); the upload route is refused by nginx itself, no replica involved (the app has no uploader)
    def answered(path: str, body: bytes) -> tuple[int, str | None]:
        req = urllib.request.Request(hall.base + path, data=body, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.headers.get("X-Replica")
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("X-Replica")

    _, answered_by = answered("/_stcore/health", b"x" * 12_000)
    # X-Replica is nginx's $upstream_addr: "a, b" when the first replica did not accept within the connect
    # timeout (a loaded machine) and nginx passed the request on, as it is set to. Either way a replica answered.
    tried = [a.strip() for a in (answered_by or "").split(",")]
    assert tried and all(a in hall.replicas for a in tried), answered_by
    assert answered("/_stcore/upload_file/none/none", b"x" * 1_000) == (403, None)
    log = hall.text()  # the launcher's active check: one line per replica before nginx started
    assert all(f"http://{a}" in log and "healthy" in log for a in hall.replicas)
    assert log.index("replica 2/2") < log.index("serve: nginx")


# --- in a browser ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser(hall):
    if CHROMIUM is None:
        pytest.skip("no chromium executable installed (browser tests need one)")
    with chromium() as b:
        yield b


class Where:
    """Which replica answered a page: every websocket handshake (via the DevTools protocol, whose events
    carry the 101 response's headers) and every HTTP response, by nginx's X-Replica header."""

    def __init__(self, page):
        self.ws: list[str] = []
        self.http: list[str] = []
        cdp = page.context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.on("Network.webSocketHandshakeResponseReceived", lambda e: self.ws.append(
            next((v for k, v in e["response"]["headers"].items() if k.lower() == "x-replica"), "?")))
        page.on("response", lambda r: self.http.append(r.headers.get("x-replica", "")) if r.headers.get("x-replica") else None)
        self._cdp = cdp

    def last_ws(self, page, n: int = 1, timeout: float = 60) -> str:
        deadline = time.time() + timeout
        while len(self.ws) < n:
            if time.time() > deadline:
                raise TimeoutError(f"no websocket #{n} within {timeout} s")
            page.wait_for_timeout(200)
        return self.ws[-1]


def _context(browser, h: Hall, replica: str | None = None, keys: dict[str, str] | None = None):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    if replica is not None:
        ctx.add_cookies([{"name": "xray_affinity", "value": keys[replica], "url": h.base}])
    return ctx


def _qs(page) -> dict[str, str]:
    return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query).items()}


def _notices(page) -> str:
    return page.evaluate("() => Array.from(document.querySelectorAll('[data-testid=\"stAlert\"]')).map(e => e.innerText).join('\\n')")


@needs_browser
def test_every_page_renders_through_the_proxy(hall, browser):
    """Every page in turn, in one browser: a title, no exception, no console error; and every page load
    (one websocket each) reached the one replica its cookie names. (One browser on one replica, rather
    than both replicas at once: on two shared cores a second cold replica only adds its own model load.)"""
    ctx = _context(browser, hall)
    failures: list[str] = []
    try:
        page = ctx.new_page()
        where = Where(page)
        for stem in STEMS:
            watch = Watch(page)
            page.goto(f"{hall.base}/{url_path(stem)}?lang=en")
            settle(page, timeout=240)
            if page.locator('[data-testid="stException"]').count():
                failures.append(f"{stem}: exception {page.locator('[data-testid=stException]').first.inner_text()[:300]}")
            if not page.locator('[data-testid="stMain"] h1').count():
                failures.append(f"{stem}: no title")
            if watch.real_errors():
                failures.append(f"{stem}: console {watch.real_errors()[:3]}")
        assert len(where.ws) == len(STEMS) and len(set(where.ws)) == 1, where.ws
        assert set(where.http) == set(where.ws), (set(where.http), set(where.ws))
    finally:
        ctx.close()
    assert not failures, "\n".join(failures)


@needs_browser
def test_two_browsers_stay_on_their_own_replicas(hall, browser):
    keys = affinity_keys(hall)
    a_addr, b_addr = sorted(hall.replicas)
    contexts = []
    try:
        # a first visit, no cookie yet: nginx hands one out, and the page and its websocket share a replica
        fresh = _context(browser, hall)
        contexts.append(fresh)
        page = fresh.new_page()
        where = Where(page)
        page.goto(f"{hall.base}/tour?lang=en&step=1")
        settle(page, timeout=180)
        assert any(c["name"] == "xray_affinity" for c in fresh.cookies())
        assert where.ws and set(where.http) == {where.ws[0]}, (where.http, where.ws)

        pages = {}
        for addr in (a_addr, b_addr):
            ctx = _context(browser, hall, addr, keys)
            contexts.append(ctx)
            page = ctx.new_page()
            pages[addr] = (page, Where(page))
            page.goto(f"{hall.base}/heads?lang=en&layer=0&head=0")
        for addr, (page, where) in pages.items():
            settle(page, timeout=180)
            assert where.last_ws(page) == addr
        # reruns on the open websocket, then a reload and another page (each a new websocket)
        for step in range(3):
            for page, _ in pages.values():
                slider = page.locator('.st-key-heads_layer input[type="range"]')
                slider.focus()
                slider.press("ArrowRight")
                settle(page)
                assert _qs(page)["layer"] == str(step + 1)
        for addr, (page, where) in pages.items():
            page.reload()
            settle(page)
            page.goto(f"{hall.base}/tour?lang=en&step=2")
            settle(page)
            assert len(where.ws) == 3, where.ws
            assert set(where.ws) == {addr} and set(where.http) == {addr}, (addr, where.ws, set(where.http))
            assert not page.locator('[data-testid="stException"]').count()
    finally:
        for ctx in contexts:
            ctx.close()


# The points of the figure titled t: its title in plotly's layout, or (presenter.chart) drawn as text above it
# (p.xr-figtitle), the figure then being the first plot after that title.
KV_POINTS_JS = ("(t) => { const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));"
                " for (const p of plots) { const tt = p.layout && p.layout.title;"
                " const s = typeof tt === 'string' ? tt : (tt && tt.text);"
                " if (s && s.includes(t)) return p.calcdata[0].length; }"
                " for (const h of document.querySelectorAll('.xr-figtitle')) {"
                " if (!h.innerText.includes(t) && !(h.dataset.label || '').includes(t)) continue;"
                " const p = plots.find(q => h.compareDocumentPosition(q) & Node.DOCUMENT_POSITION_FOLLOWING);"
                " if (p && p.calcdata) return p.calcdata[0].length; } return null }")


@needs_browser
def test_session_state_survives_20_interactions(hall, browser):
    """The generation stepper lives in the session (its KV cache, its records): 20 interactions on one
    websocket — prefill, 16 decode steps, 3 view changes — and nothing is lost, the URL keeps its state."""
    prompt = "Once upon a time, in a small village by the sea, there lived"
    title = i18n.t("generation.fig_kv", "en")
    ctx = _context(browser, hall)
    try:
        page = ctx.new_page()
        where = Where(page)
        page.goto(f"{hall.base}/generation?lang=en&chat=0&layer=1&head=2&prompt={urllib.parse.quote(prompt)}")
        settle(page, timeout=180)
        replica = where.last_ws(page)
        passes, layer = 0, 1
        for i in range(20):
            if i == 0:
                page.locator(".st-key-generation_prefill button").click()
                passes = 1
            elif i in (6, 12, 18):  # look at another layer: a view change, the stepper must stay as it is
                slider = page.locator('.st-key-generation_layer input[type="range"]')
                slider.focus()
                slider.press("ArrowRight")
                layer += 1
            else:
                page.locator(".st-key-generation_next button").click()
                passes += 1
            settle(page, quiet=1.0)
            page.wait_for_function(f"(t) => ({KV_POINTS_JS})(t) === {passes}", arg=title, timeout=60_000)
            qs = _qs(page)
            assert (qs.get("lang"), qs.get("prompt"), qs.get("chat"), qs.get("layer"), qs.get("head")) == \
                ("en", prompt, "0", str(layer), "2"), (i, qs)
            assert qs.get("step") == str(passes - 1), (i, qs)  # the step slider follows the newest pass
            assert not page.locator('[data-testid="stException"]').count(), i
        assert page.evaluate(KV_POINTS_JS, title) == 17
        assert where.ws == [replica] and set(where.http) == {replica}, (where.ws, set(where.http))  # one websocket, one replica
    finally:
        ctx.close()


@needs_browser
def test_stopping_a_replica_moves_its_students_with_their_view(hall, browser):
    keys = affinity_keys(hall)
    gone, stays = sorted(hall.replicas)
    prompt = "小明把书交给小红，因为她明天要考试。"
    contexts = []
    try:
        ctx_a = _context(browser, hall, gone, keys)
        ctx_b = _context(browser, hall, stays, keys)
        contexts += [ctx_a, ctx_b]
        a, b = ctx_a.new_page(), ctx_b.new_page()
        wa, wb = Where(a), Where(b)
        a.goto(f"{hall.base}/tour?lang=zh&step=3&layer=2&prompt={urllib.parse.quote(prompt)}")
        b.goto(f"{hall.base}/heads?lang=en&layer=0&head=0")
        settle(a, timeout=180)
        settle(b, timeout=180)
        assert wa.last_ws(a) == gone and wb.last_ws(b) == stays
        before = _qs(a)

        psutil.Process(hall.replicas[gone]).send_signal(signal.SIGTERM)  # the replica stops
        notice = i18n.t("serve.moved", "zh", n=hall.number(stays), total=2)
        a.wait_for_function("(t) => Array.from(document.querySelectorAll('[data-testid=\"stAlert\"]'))"
                            ".some(e => e.innerText.includes(t))", arg=notice[:20], timeout=120_000)
        settle(a)
        a.screenshot(path=str(LOGS / "proxy_reconnected_zh.png"), full_page=True)  # for a person to look at
        # reconnected through nginx to the other replica (or, should the browser have waited until the launcher
        # had restarted the stopped one, to that new process): either way a new session, with the notice
        assert len(wa.ws) == 2 and wa.ws[0] == gone and wa.ws[1] in (gone, stays), wa.ws
        moved_to = wa.ws[1]
        assert i18n.t("serve.moved", "zh", n=hall.number(moved_to), total=2) in _notices(a)
        # the view came back from the URL: page, language, stage, layer, prompt
        assert a.locator('[data-testid="stMain"] h1').first.inner_text().strip() == i18n.t("page.tour", "zh")
        assert painted(a.locator(".st-key-prompt textarea").input_value, prompt)[0] == prompt
        assert painted(a.locator('.st-key-tour_layer input[type="range"]').input_value, "2")[0] == "2"
        after = _qs(a)
        assert {k: after.get(k) for k in ("lang", "step", "layer", "prompt")} == \
            {k: before.get(k) for k in ("lang", "step", "layer", "prompt")}
        # ... and the student continues there
        a.locator(".st-key-tour_next_top button").click()
        settle(a)
        assert _qs(a)["step"] == "4" and not a.locator('[data-testid="stException"]').count()

        # the other replica's student saw nothing of it
        slider = b.locator('.st-key-heads_layer input[type="range"]')
        slider.focus()
        slider.press("ArrowRight")
        settle(b)
        assert _qs(b)["layer"] == "1" and wb.ws == [stays] and not _notices(b).strip()

        # the launcher noticed, took the replica out of nginx's rotation until it is back, and keeps serving
        deadline = time.time() + 60
        while "stopped with exit code" not in hall.text() and time.time() < deadline:
            time.sleep(0.5)
        assert f"http://{gone}) stopped with exit code" in hall.text()
        assert f"replica {hall.number(gone)}: restarted (1 of at most" in hall.text()
        if "again: back in rotation after" not in hall.text():  # the restarted one still loading
            assert f"server {gone} max_fails=1 fail_timeout=10s down;" in (hall.prefix / "nginx.conf").read_text()
        for _ in range(3):
            assert _get(hall.base + "/_stcore/health", f"xray_affinity={keys[gone]}")[0] == 200
    finally:
        for ctx in contexts:
            ctx.close()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_for(h: Hall, text: str, timeout: float, after: int = 0) -> None:
    deadline = time.time() + timeout
    while text not in h.text()[after:]:
        assert h.proc.poll() is None, f"the hall stopped:\n{h.text()[-3000:]}"
        assert time.time() < deadline, f"no {text!r} within {timeout:.0f} s:\n{h.text()[-3000:]}"
        time.sleep(0.5)


def _nginx_pids(h: Hall) -> tuple[int, list[int]]:
    master = next(c for c in psutil.Process(h.proc.pid).children() if c.name().startswith("nginx"))
    return master.pid, [w.pid for w in master.children()]


@needs_nginx
def test_a_stopped_replica_comes_back(hall):
    """A replica that stops (here, or SIGTERM in the browser test before) is started again on its port and is
    back in nginx's rotation once it answers; both replicas then serve."""
    if "stopped with exit code" not in hall.text():
        psutil.Process(next(iter(hall.replicas.values()))).kill()
    _wait_for(hall, "restarted (1 of at most", 60)
    _wait_for(hall, "answers /_stcore/health again: back in rotation after", START_S)  # "after": a restarted one
    keys = affinity_keys(hall)
    # nginx reloads its configuration asynchronously: workers started before the reload (which still see the
    # replica "down") finish their connections first, so the sticky routes come back within a few seconds
    deadline, seen = time.time() + 20, {}
    while True:
        seen = {addr: _get(hall.base + "/_stcore/health", f"xray_affinity={key}")[2]["x-replica"] for addr, key in keys.items()}
        if all(seen[a] == a for a in keys) or time.time() > deadline:
            break
        time.sleep(0.5)
    assert all(seen[a] == a for a in keys), seen
    assert " down;" not in (hall.prefix / "nginx.conf").read_text()


@needs_nginx
def test_nginx_killed_comes_back_and_keeps_the_replicas(hall):
    """kill -9 of nginx's master used to stop the healthy replicas, while its orphaned worker kept the port
    (answering 502) and a relaunch was refused. Now the worker is killed with it, nginx starts again on the
    same port, and the replicas are the same processes."""
    master, workers = _nginx_pids(hall)
    replicas = {c.pid for c in psutil.Process(hall.proc.pid).children() if c.pid != master}
    mark = len(hall.text())
    os.kill(master, signal.SIGKILL)
    _wait_for(hall, "nginx restarted", 60, after=mark)
    assert "stopping the replicas" not in hall.text()[mark:]
    assert not [w for w in workers if _alive(w)], "the old worker outlived its master"
    new_master, _ = _nginx_pids(hall)
    assert new_master != master
    assert {c.pid for c in psutil.Process(hall.proc.pid).children() if c.pid != new_master} == replicas
    status, body, _, _ = _get(hall.base + "/_stcore/health")
    assert status == 200 and body == "ok"


@needs_nginx
def test_ctrl_c_stops_every_process(hall):
    hall.tree += [c.pid for c in psutil.Process(hall.proc.pid).children(recursive=True)]  # restarted ones too
    pids = [hall.proc.pid, *hall.tree]
    assert len(hall.tree) >= 4, hall.tree  # two replicas, nginx's master and its worker
    code = hall.stop(timeout=60)
    assert code == 0, hall.text()[-2000:]
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if _alive(p)], f"left running: {[p for p in pids if _alive(p)]}"
    port = int(hall.base.rsplit(":", 1)[1])
    assert all(serve.port_free("127.0.0.1", p) for p in (port, *(int(a.rsplit(":", 1)[1]) for a in hall.replicas)))
    assert hall.prefix is not None and not hall.prefix.exists()  # the temp folder is gone
    assert "nothing left running (ports free)" in hall.text()
