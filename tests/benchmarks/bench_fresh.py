"""Does the mmap page pool (core.common.fresh) still pay for its lines? A trace of the embedded model with the
server's malloc settings (core.web.server.give_back_freed_memory), its kept arrays from ``fresh.empty`` (pooled,
pre-faulted mappings) or from ``np.empty``, interleaved in one process; prints the median of the paired ratios
(np.empty / fresh) with a bootstrap interval. ``--no-malloc`` leaves glibc's defaults (run it as a second process:
mallopt cannot be undone). Timings on a shared machine are noisy: trust the ratio, not the seconds.

    PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_fresh.py [--tokens 256] [--pairs 20] [--no-malloc]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from core import backends
from core.common import fresh
from core.engine import hf_trace
from core.web import server


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--no-malloc", action="store_true", help="keep glibc's malloc defaults")
    a = ap.parse_args()
    tuned = False if a.no_malloc else server.give_back_freed_memory()
    loaded = backends.load_model()
    ids = (loaded.tokenizer("The residual stream accumulates. " * 200)["input_ids"])[: a.tokens]
    pooled, plain = fresh.empty, lambda shape, dtype=np.float32: np.empty(shape, dtype)

    def timed(empty) -> float:
        hf_trace.fresh.empty = empty
        t0 = time.perf_counter()
        backends.trace_ids(loaded, ids)
        return time.perf_counter() - t0

    for empty in (pooled, plain, pooled):  # warm-up: first passes pay one-off costs
        timed(empty)
    ratios, t_pool, t_plain = [], [], []
    for i in range(a.pairs):
        order = (pooled, plain) if i % 2 == 0 else (plain, pooled)
        got = {id(e): timed(e) for e in order}
        t_pool.append(got[id(pooled)])
        t_plain.append(got[id(plain)])
        ratios.append(got[id(plain)] / got[id(pooled)])
    hf_trace.fresh.empty = pooled
    rng = np.random.default_rng(0)
    boot = sorted(float(np.median(rng.choice(ratios, len(ratios)))) for _ in range(2000))
    print(f"malloc tuned: {tuned}; {len(ids)} tokens, {a.pairs} interleaved pairs (machine shared: noisy)")
    print(f"trace median: fresh pool {statistics.median(t_pool) * 1e3:.1f} ms, np.empty {statistics.median(t_plain) * 1e3:.1f} ms")
    print(f"np.empty / fresh pool, median of paired ratios: {statistics.median(ratios):.3f} "
          f"(95 % bootstrap {boot[50]:.3f} … {boot[1949]:.3f}); pool hits {fresh.POOL.hits}, misses {fresh.POOL.misses}")


if __name__ == "__main__":
    main()
