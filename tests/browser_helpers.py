"""What the browser tests and the browser benchmarks share: a real ``streamlit run`` of the app, a
headless Chromium (playwright), and the waits and checks every page visit needs.

A plain module, without pytest: the tests import it as ``browser_helpers`` (pytest puts tests/ on the
path) and the benchmarks as ``tests.browser_helpers`` (they run as ``PYTHONPATH=. python tests/benchmarks/…``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]

# Console noise that is not an app error: the Streamlit frontend first probes the health and
# host-config endpoints relative to a page's URL path (/tour/_stcore/…), which 404s before it
# falls back to the root. Only those exact 404s are forgiven (matched against the responses).
BENIGN_404 = ("/_stcore/health", "/_stcore/host-config", "/favicon.ico", "/favicon.png")


def url_path(stem: str) -> str:
    """The page's URL path: app.py makes "journey" the default page, served at the root."""
    return "" if stem == "journey" else stem


def free_port(start: int = 8610) -> int:
    for port in range(start, start + 200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError("no free port")


@dataclass
class Server:
    """A running app: its address and its process."""

    base: str
    proc: subprocess.Popen


@contextlib.contextmanager
def streamlit_server(port_from: int = 8610, options: Sequence[str] = (), log: IO | int = subprocess.DEVNULL,
                     start_s: float = 90) -> Iterator[Server]:
    """``python -m core.web.server`` (what ``make run`` starts) on the first free port from ``port_from``,
    offline, headless, without a file watcher; yields once its health probe answers (RuntimeError after
    ``start_s`` seconds or when it exits), and stops it on the way out. ``options``: more server options."""
    port = free_port(port_from)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.web.server", "--server.port", str(port), "--server.headless", "true",
         "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false", *options],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + start_s
        while True:
            try:
                if urllib.request.urlopen(f"{base}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"streamlit did not start (exit {proc.poll()})")
            time.sleep(0.5)
        yield Server(base, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def chromium() -> Iterator:
    """A headless Chromium (playwright's Browser), closed on the way out."""
    from playwright.sync_api import sync_playwright  # deferred: importing this module needs no browser

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


class Watch:
    """Console errors and failed responses of one page."""

    def __init__(self, page):
        self.errors: list[str] = []
        self.bad: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("response", lambda r: self.bad.append(r.url) if r.status >= 400 else None)

    def real_errors(self) -> list[str]:
        benign = all(urllib.parse.urlparse(u).path.endswith(BENIGN_404) for u in self.bad)
        return [e for e in self.errors if not (benign and e.startswith("Failed to load resource") and "404" in e)]


@contextlib.contextmanager
def warm_app(port_from: int, log_name: str) -> Iterator[tuple[str, object]]:
    """One server and one browser for a test module, as (base URL, browser): the model loaded by a first visit
    outside the views the tests time; the server's log in screenshots/``log_name``."""
    SHOTS.mkdir(exist_ok=True)
    with open(SHOTS / log_name, "w") as log, streamlit_server(port_from, log=log) as app, chromium() as b:
        p = b.new_page()
        p.goto(f"{app.base}/?lang=en")
        settle(p, timeout=240)
        p.close()
        yield app.base, b


def _requests_in_flight(page) -> dict:
    """The page's HTTP requests started and not yet finished, counted from the first ``settle`` on it."""
    box = getattr(page, "_xr_requests", None)
    if box is None:
        box = {"open": set(), "late": 0}
        page.on("request", lambda r: box["open"].add(r))
        page.on("requestfinished", lambda r: box["open"].discard(r))
        page.on("requestfailed", lambda r: box["open"].discard(r))
        page._xr_requests = box
    return box


def settle(page, timeout: float = 120, quiet: float = 1.5, poll: float = 0.25) -> None:
    """Wait until the script has finished running and stayed finished for ``quiet`` seconds, with no HTTP
    request of the page in flight during that time. Streamlit loads the code of an element (a slider, a code
    block) on its first use in a page, after the script's run has ended: the first lesson step's page in a
    new browser context was read before its layer slider and its code block were drawn (this session's fresh-
    clone run: "no layer slider", and the screenshot's empty code block), stop 34's CI before its prompt box
    was."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout * 1000)
    box = _requests_in_flight(page)
    deadline, since = time.time() + timeout, None
    while time.time() < deadline:
        state = page.evaluate("() => document.querySelector('[data-testid=\"stApp\"]')?.getAttribute('data-test-script-state')")
        if state == "notRunning" and not box["open"]:
            since = since or time.time()
            if time.time() - since >= quiet:
                return
        else:
            if state == "notRunning" and box["open"]:
                box["late"] += 1
            since = None
        time.sleep(poll)
    raise TimeoutError(f"{page.url} still running after {timeout} s")


AXE = ROOT / ".venv" / "axe" / "node_modules" / "axe-core" / "axe.min.js"  # `make browser` installs it (npm)
AXE_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")


def grow(page) -> None:
    """The viewport as tall as the main area's content (it scrolls inside the app), so that every element
    is on screen for a check that measures what is painted (axe's colour contrast)."""
    h = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]')?.scrollHeight || 900")
    page.set_viewport_size({"width": page.viewport_size["width"], "height": int(min(max(h, 900), 12000))})
    time.sleep(0.5)


def axe_violations(page) -> list[str]:
    """axe-core's WCAG 2.1 A and AA violations on the page as it stands: "rule (impact): n nodes, e.g. …".
    Fails, rather than skips, when axe-core is not installed: the browser tier promises the check."""
    if not AXE.exists():
        raise RuntimeError(f"axe-core is missing at {AXE}: run `make browser` (npm install axe-core)")
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(
        "async (tags) => { const r = await axe.run(document, {runOnly: {type: 'tag', values: tags}});"
        " return r.violations.map(v => [v.id, v.impact, v.nodes.length, v.nodes[0].target.join(' '),"
        " (v.nodes[0].failureSummary || '').slice(0, 240)]) }", list(AXE_TAGS))
    return [f"{rule} ({impact}): {n} nodes, e.g. {target} — {why}" for rule, impact, n, target, why in found]


def shoot(page, name: str) -> None:
    """A full screenshot: the main area scrolls inside the app, so grow the viewport to fit it."""
    h = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]')?.scrollHeight || 900")
    page.set_viewport_size({"width": 1400, "height": int(min(max(h, 900), 12000))})
    time.sleep(0.5)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 900})


def h1(page) -> str:
    return page.locator('[data-testid="stMain"] h1').first.inner_text().strip()


def painted(read, want, timeout: float = 5, poll: float = 0.2, same=lambda a, b: a == b):
    """``read()`` until it is ``same`` as ``want`` or ``timeout`` seconds pass: (last value, the values read before it).

    ``settle`` waits for the script run to end; the browser paints a widget's new value a moment later,
    and on a slower machine that moment can fall after ``settle`` returns (stop 34's CI read the prompt
    box once, got another value, and a second read a moment later gave the step's). A value that never
    becomes ``want`` is returned as the last one read, so the test still fails and says what it saw."""
    seen, deadline = [], time.time() + timeout
    while True:
        got = read()
        if same(got, want) or time.time() >= deadline:
            return got, seen
        seen.append(got)
        time.sleep(poll)
