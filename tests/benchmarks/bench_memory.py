"""Benchmark: the server's memory after 50 prompts in one browser session (issue "Hardening", §5).

    PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_memory.py [--prompts 50] [--ttl 30]

Starts the app (``python -m core.web.server``) on the embedded model, opens it in headless Chromium,
types ``--prompts`` distinct prompts into the sidebar one after another (each traced on the journey
page; every tenth also opens the attention-heads page, which derives layers on demand), and reads
the server process's resident memory (VmRSS) from /proc: after start-up, the peak while prompting
(sampled every 0.2 s), after the last prompt, and after the browser closed and the disconnected
session's time-to-live (``server.disconnectedSessionTTL``, set with ``--ttl``) has passed.

Last line: ``rss_after_50_gb=<x>`` (target ≤ 1.6 with the embedded model).
"""

from __future__ import annotations

import argparse
import functools
import threading
import time
from pathlib import Path

from tests import browser_helpers

# the browser tests' wait, with this benchmark's patience: a long wait, a shorter quiet time
settle = functools.partial(browser_helpers.settle, timeout=300, quiet=1.0, poll=0.2)


def rss_gb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024**2
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=50)
    ap.add_argument("--ttl", type=int, default=30, help="server.disconnectedSessionTTL for this run, in seconds")
    a = ap.parse_args()
    peak = [0.0]
    stop = threading.Event()

    with browser_helpers.streamlit_server(8700, ("--server.disconnectedSessionTTL", str(a.ttl)), start_s=300) as app:
        base, proc = app.base, app.proc

        def sample() -> None:
            while not stop.is_set():
                try:
                    peak[0] = max(peak[0], rss_gb(proc.pid))
                except OSError:
                    return
                time.sleep(0.2)

        try:
            threading.Thread(target=sample, daemon=True).start()
            with browser_helpers.chromium() as browser:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(base)
                settle(page)
                print(f"after start-up and the first page: {rss_gb(proc.pid):.2f} GB")
                t0 = time.time()
                seen = 0
                for i in range(a.prompts):
                    box = page.locator("textarea").first  # the sidebar's shared prompt box
                    text = f"Prompt {i}: the {i}th student asks why attention needs {i % 7 + 2} heads and a KV cache."
                    box.fill(text)
                    box.press("Control+Enter")
                    settle(page)
                    seen += page.locator("code").filter(has_text=f"Prompt {i}:").count() > 0  # the journey's stage 1 shows the text
                    if i % 10 == 9:
                        page.goto(f"{base}/heads")
                        settle(page)
                        page.goto(base)
                        settle(page)
                print(f"{a.prompts} prompts ({seen} confirmed traced on the page) in {time.time() - t0:.0f} s; RSS now {rss_gb(proc.pid):.2f} GB, peak {peak[0]:.2f} GB")
                after = rss_gb(proc.pid)
            time.sleep(a.ttl + 15)
            print(f"after the browser closed and {a.ttl + 15} s: {rss_gb(proc.pid):.2f} GB")
            print(f"rss_peak_gb={peak[0]:.2f}")
            print(f"rss_after_50_gb={after:.2f}")
        finally:
            stop.set()


if __name__ == "__main__":
    main()
