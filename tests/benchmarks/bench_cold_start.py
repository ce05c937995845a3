"""Benchmark: from starting the server (what ``make run`` starts: ``python -m core.web.server``) to the first
page settled in a headless Chromium, cold and warm.

    PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_cold_start.py [--lang en|zh] [--runs 1] [--shot cold.png]

``make run`` first checks the offered models (``python -m core.web.offer``), then execs the server: both are
timed here, from the offer check's start (``offer_s`` is its share). ``--shot``: a screenshot of the cold
load's page, taken when its loading bar first shows words (to look at what a reader sees in that language).

* **cold**: the converted-model cache (``XRAY_CACHE_DIR``) is an empty temporary folder, so the first page
  converts the embedded GGUF (de-quantise, write safetensors + manifest) before it can show anything;
* **warm**: a new server process on the same folder, the converted model now there (the process still
  hashes it once, checks its sizes and loads it).

Timed from the server's launch: ``health_s`` (the health probe answers), ``settled_s`` (the first page's
script finished and stayed finished for 1.5 s; the quiet 1.5 s is not counted). While the first page runs,
the loading bar's text is read every 0.2 s and every distinct text is printed: what the reader is told
(step and share, in the page's language). Last lines: ``cold_start_s=``, ``warm_start_s=``, the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: browser_helpers

import browser_helpers as bh

STATE = "() => document.querySelector('[data-testid=\"stApp\"]')?.getAttribute('data-test-script-state')"
BAR = "() => Array.from(document.querySelectorAll('[data-testid=\"stProgress\"]')).map(e => e.innerText.trim())"
QUIET = 1.5


def first_page(browser, base: str, lang: str, t0: float, timeout: float = 600, shot: str | None = None) -> tuple[float, list[str]]:
    """Open the app's root; return (seconds since ``t0`` when the script finished for good, bar texts seen)."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    seen: list[str] = []
    try:
        page.goto(f"{base}/?lang={lang}", timeout=timeout * 1000)
        page.wait_for_selector('[data-testid="stApp"]', timeout=timeout * 1000)
        deadline, since = time.time() + timeout, None
        while time.time() < deadline:
            for text in page.evaluate(BAR):
                if text and (not seen or seen[-1] != text):
                    seen.append(text)
                    if shot and len(seen) == 2:  # a step past the first words: the bar and its sentence on screen
                        page.screenshot(path=shot)
            if page.evaluate(STATE) == "notRunning":
                since = since or time.perf_counter()
                if time.perf_counter() - since >= QUIET:
                    return since - t0, seen
            else:
                since = None
            time.sleep(0.2)
        raise TimeoutError(f"the first page still runs after {timeout} s")
    finally:
        page.close()


def one_start(browser, lang: str, shot: str | None = None) -> tuple[float, float, float, list[str]]:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "core.web.offer"], cwd=bh.ROOT, check=True,  # make run's first step
                   env=dict(os.environ, PYTHONPATH=str(bh.ROOT)), stdout=subprocess.DEVNULL)
    offer = time.perf_counter() - t0
    with bh.streamlit_server(start_s=300) as srv:
        health = time.perf_counter() - t0
        settled, seen = first_page(browser, srv.base, lang, t0, shot=shot)
    return offer, health, settled, seen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lang", default="en")
    ap.add_argument("--runs", type=int, default=1, help="cold+warm pairs")
    ap.add_argument("--shot", default=None, help="PNG path: the cold load's page while its bar shows words")
    a = ap.parse_args()
    cold, warm = [], []
    with bh.chromium() as browser:
        for _ in range(a.runs):
            folder = tempfile.mkdtemp(prefix="xray-cold-")
            os.environ["XRAY_CACHE_DIR"] = folder  # the server inherits it: an empty converted-model cache
            try:
                for name, out in (("cold", cold), ("warm", warm)):
                    offer, health, settled, seen = one_start(browser, a.lang, a.shot if name == "cold" else None)
                    out.append(settled)
                    print(f"{name}: offer_s={offer:6.2f}  health_s={health:6.2f}  settled_s={settled:6.2f}  (cache {folder})",
                          flush=True)
                    for text in seen:
                        print(f"    bar: {text}")
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    print(f"cold_start_s={min(cold):.2f}")
    print(f"warm_start_s={min(warm):.2f}")
    print(f"load_average={' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
