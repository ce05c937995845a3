"""Benchmark: every page's settle time and the figure bytes it sends, at three prompt lengths.

    PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_pages.py [--prompts default,500,long] [--pages heads,masks]

For each prompt (the default question; a ~500-token text; the 📜 English long document, ~3,200
tokens) and each registered page, the page's script is run twice in one Streamlit session
(``streamlit.testing``'s AppTest, the same script the browser runs, without the browser's drawing):
the *first visit* (cold: what this process had not computed yet for that prompt — traces, derived
layers, measurements) and the *second visit* (warm: the caches hold it). The time is wall-clock
from the rerun's start to the script's end: what a reader waits for before the page stops changing,
minus the browser's own rendering. Figure bytes are the plotly JSON the page hands the browser.

Printed per page and prompt: ``first_s``, ``second_s``, ``figure_mb``; last lines: the slowest warm
page (``max_warm_s=``), the slowest first visit at ~500 tokens (``max_first_500_s=``) and the largest
figure payload at the long document (``max_figure_mb_long=``). Targets: ≤ 2 s warm, ≤ 5 s at ~500
tokens, ≤ 5 MB of figures at 4,096 tokens.

**First visits against one trace** (issue 28): before each page's first visit the process's traces,
derived layers and cached results are dropped (the model stays loaded), so every first visit includes
the trace it needs (the model is loaded before, by a visit with a short prompt). The trace
each first visit makes (``core.backends.trace``, wrapped with a timer where the pages' cache calls it) is
timed inside that visit (``trace_s``: the same thread, the same moment's load — a trace timed apart from the
page, in the main thread of a machine with 10 runnable processes on 2 cores, took 2–3 times as long), and
the first visit is printed as a ratio to it (``x_trace=``; ``-`` for a page that made no trace). Last lines also give ``journey_first_x_trace_long=`` (target ≤ 1.5) and ``max_other_first_x_trace_long=`` (target
≤ 1.2, over the pages whose first visit traced the document itself: ``trace_tokens`` ≥ 1,024; a page that
traces a short prompt of its own is listed apart, its ratio being mostly the page's own drawing) and the load average when the run ended (on a shared machine only ratios within one run count).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

from core import backends
from core.learn import long_docs
from core.web import cache
from core.web.nav import STEMS

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
TEXT = ("A teacher explains how a decoder-only transformer reads a sentence: tokens become vectors, "
        "attention mixes them, the feed-forward network rewrites each one, and the last position predicts. ")


def prompt_of(name: str) -> str:
    if name == "default":
        return "What is the capital of France?"
    if name == "500":
        return (TEXT * 20)[: 2600]  # about 500 SmolLM2 tokens
    if name == "long":
        return long_docs.load("en").text
    raise ValueError(name)


def figure_bytes(at: AppTest) -> int:
    return sum(len(c.proto.spec) for c in at.get("plotly_chart"))


def made_trace() -> bool:
    return any(isinstance(k, tuple) and k and k[0] == "trace" for k in list(cache.store()._items))


TRACED: list[tuple[float, int]] = []  # (seconds, tokens) of every core.backends.trace the pages made, in order
DOC_TOKENS = 1024  # a first visit's trace this long or longer is a trace of the long document itself


def _timed_trace(trace):
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        n = 0
        try:
            tr = trace(*args, **kwargs)
            n = int(tr.n_tokens)
            return tr
        finally:
            TRACED.append((time.perf_counter() - t0, n))
    return timed


backends.trace = _timed_trace(backends.trace)  # the pages' cache calls it through the module: timed where it runs


def forget() -> None:
    """What a first visit had not computed yet: traces, derived layers, cached results (not the model)."""
    cache.store().clear()
    st.cache_data.clear()


def run_page(at: AppTest, stem: str, prompt: str) -> tuple[float, int, list[str]]:
    at.session_state["prompt"] = prompt  # the sidebar's shared prompt, as a reader's typing leaves it
    at.switch_page(f"pages/{stem}.py")
    t0 = time.perf_counter()
    at.run()
    return time.perf_counter() - t0, figure_bytes(at), [str(e.value)[:120] for e in at.exception]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", default="default,500,long")
    ap.add_argument("--pages", default=",".join(STEMS))
    a = ap.parse_args()
    rows = []
    ratios: dict[tuple[str, str], float] = {}
    doc: dict[tuple[str, str], bool] = {}  # did that first visit trace the document itself (not a prompt of its own)
    for name in a.prompts.split(","):
        at = AppTest.from_file(APP, default_timeout=900)
        at.session_state["lang"] = "en"
        prompt = prompt_of(name)
        run_page(at, "journey", "Hello")  # the model loaded and this session started: not part of any first visit
        for stem in a.pages.split(","):
            forget()
            TRACED.clear()
            first, mb1, err1 = run_page(at, stem, prompt)
            traced = made_trace() and bool(TRACED)
            ref = sum(t for t, _ in TRACED)  # the traces this first visit needed, timed inside it
            longest = max((n for _, n in TRACED), default=0)
            second, mb2, err2 = run_page(at, stem, prompt)
            rows.append((name, stem, first, second, max(mb1, mb2) / 1e6, err1 or err2))
            x = first / ref if traced and ref > 0 else None
            if x is not None:
                ratios[(name, stem)] = x
                doc[(name, stem)] = longest >= DOC_TOKENS
            print(f"{name:8s} {stem:14s} first_s={first:7.2f}  second_s={second:6.2f}  figure_mb={max(mb1, mb2) / 1e6:6.2f}"
                  f"  trace_s={ref:6.2f}  trace_tokens={longest:5d}  x_trace={f'{x:.2f}' if x is not None else '-'}"
                  + (f"  ERRORS {err1 or err2}" if (err1 or err2) else ""), flush=True)
    warm = max((r[3] for r in rows), default=0.0)
    first_500 = max((r[2] for r in rows if r[0] == "500"), default=0.0)
    big_long = max((r[4] for r in rows if r[0] == "long"), default=0.0)
    print(f"max_warm_s={warm:.2f}")
    print(f"max_first_500_s={first_500:.2f}")
    print(f"max_figure_mb_long={big_long:.2f}")
    if ("long", "journey") in ratios:
        print(f"journey_first_x_trace_long={ratios[('long', 'journey')]:.2f}")
    others = {stem: x for (n, stem), x in ratios.items() if n == "long" and stem != "journey" and doc[(n, stem)]}
    if others:
        worst = max(others, key=others.get)
        print(f"max_other_first_x_trace_long={others[worst]:.2f} ({worst}; pages whose first visit traced the document)")
    own = [f"{stem} {x:.2f}" for (n, stem), x in ratios.items() if n == "long" and not doc[(n, stem)]]
    if own:
        print("pages that traced a prompt of their own, not the document: " + ", ".join(own))
    print(f"load_average={' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
