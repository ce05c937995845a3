"""Benchmark: the Stepper's time per decode token vs Hugging Face ``generate`` (greedy), in one run.

    .venv/bin/python tests/benchmarks/bench_generate.py [--new 64] [--reps 5] [--model PATH]

Both decode the same prompt on the same loaded model, greedy, the same number of new tokens.
Time per decode token is measured the same way for both, from the outside:

    (wall time for N new tokens − wall time for 1 new token) / (N − 1)

so the prefill and one-off costs cancel. The Stepper runs as the page uses it: attention rows
recorded, top candidates, KV bytes per layer read every step. Runs alternate (HF, stepper, HF …)
so drift from other processes hits both; medians are reported. Last line: ``ratio_decode=<x>``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from core.backends import load_model
from core.engine import tokens
from core.gen import generate

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def hf_seconds(loaded, ids: list[int], n: int) -> tuple[float, list[int]]:
    x = torch.tensor([ids])
    with loaded.lock, torch.inference_mode():
        t0 = time.perf_counter()
        out = loaded.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                                    pad_token_id=loaded.tokenizer.eos_token_id)
        dt = time.perf_counter() - t0
    return dt, out[0, len(ids):].tolist()


def stepper_seconds(loaded, ids: list[int], n: int, record: bool) -> tuple[float, list[int]]:
    t0 = time.perf_counter()
    st = generate.Stepper(loaded, ids, None, max_steps=n, record_attention=record)
    st.run()
    return time.perf_counter() - t0, st.generated


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--model", default=None)
    a = ap.parse_args()
    loaded = load_model(a.model)
    ids = tokens.encode(loaded.tokenizer, PROMPT).ids
    n = a.new
    print(f"model {loaded.facts.name}, prompt {len(ids)} tokens, {n} new tokens, torch threads {torch.get_num_threads()}")
    hf_seconds(loaded, ids, 4)  # warm-up
    stepper_seconds(loaded, ids, 4, True)
    hf_n, hf_1, st_n, st_1, raw_n, raw_1 = [], [], [], [], [], []
    for _ in range(a.reps):
        t, hf_tokens = hf_seconds(loaded, ids, n)
        hf_n.append(t)
        hf_1.append(hf_seconds(loaded, ids, 1)[0])
        t, st_tokens = stepper_seconds(loaded, ids, n, True)
        st_n.append(t)
        st_1.append(stepper_seconds(loaded, ids, 1, True)[0])
        raw_n.append(stepper_seconds(loaded, ids, n, False)[0])
        raw_1.append(stepper_seconds(loaded, ids, 1, False)[0])
    if st_tokens != hf_tokens:
        print(f"WARNING: tokens differ (stepper {len(st_tokens)}, HF {len(hf_tokens)})")
    k = len(hf_tokens) - 1
    med = statistics.median
    hf_tok = (med(hf_n) - med(hf_1)) / k
    st_tok = (med(st_n) - med(st_1)) / k
    raw_tok = (med(raw_n) - med(raw_1)) / k
    print(f"tokens identical: {st_tokens == hf_tokens} ({len(st_tokens)} new tokens)")
    print(f"HF generate        : {hf_tok * 1e3:.2f} ms per decode token (median of {a.reps}; {n} tokens {med(hf_n):.3f} s)")
    print(f"Stepper (recording): {st_tok * 1e3:.2f} ms per decode token ({n} tokens {med(st_n):.3f} s)")
    print(f"Stepper (no record): {raw_tok * 1e3:.2f} ms per decode token")
    print(f"ratio_decode={st_tok / hf_tok:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
