"""Benchmark: one "Why this token?" receipt (``core.cause.receipt`` through ``core.web.receipt.compute``) on a
64-token prompt of the embedded model, beside one plain forward pass of the same prompt, in one process.

    .venv/bin/python tests/benchmarks/bench_receipt.py [--reps 5] [--tokens 64] [--threads N]

The trace is made once beforehand and not counted (a page that offers the receipt holds it already). Receipts and
plain passes alternate so drift hits both; the receipt's forward passes are counted by the receipt itself (a
thread-scoped hook on the model), with the rows × positions they fed through the last block. The first line gives the machine's load
average over the run beside the cores: on a busy machine, the ratio to the plain pass in this same process is
the figure to trust. Last lines: ``receipt_s_<T>=<median>``, ``receipt_spread_s_<T>=<min>..<max>``,
``forward_s_<T>=``, ``ratio_receipt_forward=``, ``receipt_forward_passes=``, ``receipt_rows_positions=``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from core import backends
from core.web import receipt as web_receipt

SENTENCE = "The Eiffel Tower is in Paris, and the Colosseum is in Rome. "


def prompt_ids(loaded, n: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < n:
        ids += loaded.tokenizer(SENTENCE, add_special_tokens=False)["input_ids"]
    return ids[:n]


def plain_forward(loaded, ids) -> float:
    x = torch.tensor([list(ids)])
    t0 = time.perf_counter()
    with loaded.lock, torch.inference_mode():
        loaded.model(input_ids=x, use_cache=False)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    loaded = backends.load_model(None)
    ids = prompt_ids(loaded, a.tokens)
    tr = backends.trace_ids(loaded, ids)
    web_receipt.compute(loaded, tr, len(ids) - 1)  # warm-up (first-call allocations)
    plain_forward(loaded, ids)
    rec, fwd, last = [], [], None
    for _ in range(a.reps):
        fwd.append(plain_forward(loaded, ids))
        t0 = time.perf_counter()
        last = web_receipt.compute(loaded, tr, len(ids) - 1)
        rec.append(time.perf_counter() - t0)
    T = len(ids)
    med, fmed = statistics.median(rec), statistics.median(fwd)
    load = os.getloadavg()[0]
    print(f"# load average {load:.2f} on {os.cpu_count()} cores at the end; torch threads {torch.get_num_threads()}; "
          f"{a.reps} receipts alternating with plain forward passes of the same {T} tokens")
    print(f"receipt_s_{T}={med:.3f}")
    print(f"receipt_spread_s_{T}={min(rec):.3f}..{max(rec):.3f}")
    print(f"forward_s_{T}={fmed:.4f}")
    print(f"ratio_receipt_forward={med / fmed:.1f}")
    print(f"receipt_forward_passes={last.forward_passes}")
    print(f"receipt_rows_positions={last.rows_positions}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
