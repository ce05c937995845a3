"""Benchmark: a full trace vs a plain eager HF forward of the same prompt, in one run.

    .venv/bin/python tests/benchmarks/bench_trace.py [--reps 7] [--model PATH]

The plain forward is an independent, untouched HF model loaded with attn_implementation="eager"
(the implementation that returns attention weights at all), use_cache=False like the trace.
Runs alternate (plain, trace, plain, trace …) so drift hits both; the median of each is reported.
Last two lines: ``ratio_256=<x>`` and ``trace_mb_256=<y>``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from core import backends
from core.backends import load_model
from core.engine.hf import converted_dir, embedded_gguf_path

TEXT = (
    "The transformer reads every token of its context at once. Each block lets positions exchange "
    "information through attention, then rewrites each position with a feed-forward network. "
)


def ids_of_length(tokenizer, n: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < n:
        ids += tokenizer(TEXT)["input_ids"]
    return ids[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--model", default=None)
    ap.add_argument("--lengths", default="64,256,512")
    a = ap.parse_args()

    from transformers import AutoModelForCausalLM

    loaded = load_model(a.model)
    folder = a.model or str(converted_dir(embedded_gguf_path()))
    plain = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    print(f"model: {loaded.facts.name}; torch threads: {torch.get_num_threads()}; reps: {a.reps}")

    results = {}
    for n in [int(x) for x in a.lengths.split(",")]:
        ids = ids_of_length(loaded.tokenizer, n)
        x = torch.tensor([ids])
        with torch.inference_mode():
            plain(input_ids=x, use_cache=False)  # warm-up both paths
        backends.trace_ids(loaded, ids)
        t_plain, t_trace = [], []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            with torch.inference_mode():
                plain(input_ids=x, use_cache=False)
            t_plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            tr = backends.trace_ids(loaded, ids)
            t_trace.append(time.perf_counter() - t0)
        mp, mt = statistics.median(t_plain), statistics.median(t_trace)
        mb = tr.nbytes / 1e6
        results[n] = (mt / mp, mb)
        print(f"T={n:4d}  plain eager forward {mp * 1e3:8.1f} ms   full trace {mt * 1e3:8.1f} ms   "
              f"ratio {mt / mp:5.2f}x   trace holds {mb:7.1f} MB")
        del tr
    if 256 in results:
        print(f"ratio_256={results[256][0]:.3f}")
        print(f"trace_mb_256={results[256][1]:.1f}")


if __name__ == "__main__":
    main()
