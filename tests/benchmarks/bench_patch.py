"""Benchmark: a full layer × position residual-patching sweep vs one plain forward pass, in one run.

    .venv/bin/python tests/benchmarks/bench_patch.py [--reps 3] [--model PATH] [--solo 24] [--threads 1]
                                                     [--site resid|attn_out|mlp_out|z] [--long K]

The plain forward is the shared model's own forward of the corrupted prompt ([1, T], no cache, no
hook), the cost of one unpatched run. The sweep is ``core.cause.patching.sweep(…, "resid", …)``: L × T
patched runs, batched, starting each pass at its first patched block, reusing the clean and
corrupted activations recorded once (the recording is timed separately and not counted).
Plain passes and sweeps alternate so drift hits both; medians are reported. ``--solo N`` also
times N patched runs one by one (one forward each), to show what batching saves.
``--site z`` sweeps every head at the last position instead (L × H runs, each feeding only the
last position after the corrupted run's cached keys and values); ``--long K`` puts a shared sentence
K times before both prompts (K = 6: 60 tokens, near the section's 64-token limit), where the grid is
swept in tiles that start after cached keys and values (``patching.plan``); ``--by-layer`` also times
the same runs by layer with every position fed, and prints how much faster the plan is.
Last lines: ``runs=<n>``, ``ratio_per_run=<x / n>``, ``ratio_patch_sweep=<x>`` (aim: x ≤ 0.5 × runs).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from core import backends
from core.cause import pair, patching

CLEAN = "The Eiffel Tower is a famous landmark in the city of"
CORRUPTED = "The Colosseum is a famous landmark in the city of"


def plain_forward(loaded, ids) -> float:
    x = torch.tensor([list(ids)])
    t0 = time.perf_counter()
    with loaded.lock, torch.inference_mode():
        loaded.model(input_ids=x, use_cache=False) if not loaded.is_toy else loaded.model(x)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", default=None)
    ap.add_argument("--solo", type=int, default=0, help="also time this many patched runs one by one")
    ap.add_argument("--chunk", type=int, default=None, help="patched runs per pass (default: patching.chunk_size)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    ap.add_argument("--site", default="resid", choices=patching.PATCHED, help="the site swept (z: every head at the last position)")
    ap.add_argument("--long", type=int, default=0, help="repeat the pair's shared opening this many times (a longer pair)")
    ap.add_argument("--by-layer", action="store_true", help="also time the same runs by layer, every position fed (no cache)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)

    loaded = backends.load_model(a.model)
    lead = "Here is a sentence about a place. " * a.long
    pt = pair.encode_pair(loaded.tokenizer, lead + CLEAN, lead + CORRUPTED)
    pt.require_same_length()
    ans = pair.answers(loaded.tokenizer, " Paris", " Rome")
    T, L = pt.n_tokens, loaded.facts.n_layers
    print(f"model: {loaded.facts.name}; torch threads: {torch.get_num_threads()}; T={T} tokens, L={L} layers")

    t0 = time.perf_counter()
    base = patching.capture(loaded, pt.ids_clean, pt.ids_corrupted)
    print(f"recording clean + corrupted (once): {(time.perf_counter() - t0) * 1e3:.0f} ms")
    sp = patching.sweep_plan(base, a.site, chunk=a.chunk)
    print(f"plan: {sp.runs} runs, {sp.unchanged} of them the corrupted run itself (not computed), the rest in {sp.passes} passes, "
          f"{'tiled after cached keys and values' if sp.cached else 'by layer'}, computing {100 * sp.share:.1f} % of the runs in full")
    every, _ = patching.sweep_patches(base, a.site)
    for _ in range(2):  # warm-up
        plain_forward(loaded, pt.ids_corrupted)
    patching.logit_diffs(loaded, base, [patching.Patch("resid", 0, 0)], ans.answer, ans.foil)

    plain, sweeps, by_layer = [], [], []
    grid = None
    for _ in range(a.reps):
        plain += [plain_forward(loaded, pt.ids_corrupted) for _ in range(5)]
        t0 = time.perf_counter()
        grid = patching.sweep(loaded, base, a.site, ans.answer, ans.foil, chunk=a.chunk)
        sweeps.append(time.perf_counter() - t0)
        if a.by_layer:  # the same runs, interleaved with the sweeps so that drift hits both
            t0 = time.perf_counter()
            patching.logit_diffs(loaded, base, every, ans.answer, ans.foil, chunk=a.chunk, reuse_prefix=False)
            by_layer.append(time.perf_counter() - t0)
    plain += [plain_forward(loaded, pt.ids_corrupted) for _ in range(5)]
    mp, ms = statistics.median(plain), statistics.median(sweeps)
    runs = grid.size
    ratio = ms / mp
    print(f"plain forward {mp * 1e3:.1f} ms (median of {len(plain)});  sweep of {runs} runs {ms:.2f} s "
          f"(median of {len(sweeps)}: {', '.join(f'{s:.2f}' for s in sweeps)})")
    if by_layer:
        mb = statistics.median(by_layer)
        print(f"by layer, every position fed (unchanged runs skipped alike): {mb:.2f} s (median of {len(by_layer)}: {', '.join(f'{s:.2f}' for s in by_layer)})"
              f" → the plan is {mb / ms:.2f}× faster")
    if a.solo:  # runs that are computed (not the corrupted run itself)
        cells = [p for p in every if not patching.unchanged(base, p)]
        cells = cells[:: max(1, len(every) // a.solo)][: a.solo]
        t0 = time.perf_counter()
        for p in cells:
            patching.logit_diffs(loaded, base, [p], ans.answer, ans.foil)
        per = (time.perf_counter() - t0) / len(cells)
        print(f"one by one: {per * 1e3:.1f} ms per patched run ({per / mp:.2f}× a plain forward) → "
              f"{per * (runs - sp.unchanged):.1f} s for the sweep's {runs - sp.unchanged} computed runs unbatched")
    print(f"target: ratio ≤ 0.5 × runs = {0.5 * runs:.0f}")
    print(f"runs={runs}")
    print(f"ratio_per_run={ratio / runs:.3f}")
    print(f"ratio_patch_sweep={ratio:.1f}")


if __name__ == "__main__":
    main()
