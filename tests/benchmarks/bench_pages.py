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
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.learn import long_docs
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
    for name in a.prompts.split(","):
        at = AppTest.from_file(APP, default_timeout=900)
        at.session_state["lang"] = "en"
        prompt = prompt_of(name)
        for stem in a.pages.split(","):
            first, mb1, err1 = run_page(at, stem, prompt)
            second, mb2, err2 = run_page(at, stem, prompt)
            rows.append((name, stem, first, second, max(mb1, mb2) / 1e6, err1 or err2))
            print(f"{name:8s} {stem:14s} first_s={first:7.2f}  second_s={second:6.2f}  figure_mb={max(mb1, mb2) / 1e6:6.2f}"
                  + (f"  ERRORS {err1 or err2}" if (err1 or err2) else ""), flush=True)
    warm = max((r[3] for r in rows), default=0.0)
    first_500 = max((r[2] for r in rows if r[0] == "500"), default=0.0)
    big_long = max((r[4] for r in rows if r[0] == "long"), default=0.0)
    print(f"max_warm_s={warm:.2f}")
    print(f"max_first_500_s={first_500:.2f}")
    print(f"max_figure_mb_long={big_long:.2f}")


if __name__ == "__main__":
    main()
