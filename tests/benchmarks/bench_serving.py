"""Benchmark: the serving lab (issue 24) on this machine — continuous batching against the same requests
served one at a time, and TTFT with block (prefix) sharing against without.

    PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_serving.py [--quick] [--reps N] [--model PATH]

1. Throughput, N = 1, 4, 8, 16 requests of 64-token prompts and 32 new tokens (greedy, all arriving at
   once, block sharing off so only batching is measured): tokens per second of transformers' continuous
   batching engine (``serving.run_workload``: tokens ÷ time from the first arrival to the last token)
   ÷ the same requests one after another with HF ``generate`` on the same plain model (tokens ÷ the sum
   of their wall times). Every rep runs both, alternating which goes first, so drift from other processes
   hits both. Last line of the part: ``ratio_cb_8=`` (target ≥ 2). Where the time goes: the engine's own
   steps (prefill steps, decode steps and their batch size, the gap between steps).
2. Prefix reuse: k requests that share a 300-token system prompt (and differ in a 16-token question),
   arriving one after another far enough apart that none waits for another; TTFT of the requests after the
   first, with block sharing ÷ without (same arrivals, runs interleaved). ``ratio_prefix_ttft=`` (target
   ≤ 0.6).

3. A crafted editor message (issue 39): N rows added to the lab's table (N = 200, 2,000). The time until the
   lab refuses it (``serving.check_edits`` on the parsed message, before the editor applies anything)
   against the time Streamlit's editor takes to apply the rows (its ``_apply_row_additions``, what the page
   ran before: it grows with N², so 20,000 rows took minutes). ``ratio_editor_2000=``. ``--editor``: this
   part only (no model).

Medians over reps, with the spread (min–max). ``--quick``: N = 1 and 8 only, 2 reps, k = 3.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import pandas as pd
import pyarrow as pa
import torch
from streamlit.elements.lib.column_config_utils import determine_dataframe_schema
from streamlit.elements.widgets import data_editor

from core.backends import load_model
from core.gen import serving, workloads
from core.gen.serving import Request

TEXT = ("The history of the lighthouse begins in the ancient world, when fires were lit on hills to guide ships "
        "home. Later, towers of stone carried the flame higher, and lenses and mirrors sent the light further "
        "across the water. Keepers lived beside the lamp, trimming wicks, winding clockwork and writing the "
        "weather in their logbooks, night after night, for years. Today most lights are automatic, yet sailors "
        "still read the coast by the rhythm of their flashes, each lighthouse with a pattern of its own. ") * 12
SYSTEM = ("You are a patient assistant for a public library. Answer questions about opening hours, borrowing "
          "rules, late fees, reading rooms, the children's corner, printing, the catalogue, inter-library loans, "
          "events and accessibility. Be brief, polite and precise; when you do not know, say so and suggest asking "
          "the front desk. Never invent a rule. ") * 6
QUESTIONS = ["When does the library open on Sunday?", "How many books can I borrow at once?",
             "Is there a fee for a late return?", "Can I print a document here?", "Where is the children's corner?",
             "Do you lend e-books?"]


def med_spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def windows(tok, n: int, length: int) -> list[list[int]]:
    """n different prompts of exactly ``length`` tokens, cut from one long text at different places."""
    ids = tok(TEXT)["input_ids"]
    step = max(1, (len(ids) - length) // max(1, n))
    return [ids[i * step: i * step + length] for i in range(n)]


def engine_run(plain, reqs: list[Request], ids: list[list[int]]) -> serving.ServeResult:
    return serving.run_workload(plain, reqs, prompt_ids=ids, page_size=32, max_batch_tokens=1024,
                                prefix_sharing=False, solo=False)


def one_at_a_time(plain, ids: list[list[int]], new: int) -> tuple[float, int]:
    """Tokens per second of HF ``generate`` on each request in turn (each in a thread of its own, as the
    engine's steps are: ``serving.solo_generate``), and the tokens made."""
    toks, secs = 0, 0.0
    for x in ids:
        out, dt = serving.solo_generate(plain, x, new)
        toks, secs = toks + len(out), secs + dt
    return toks / secs, toks


def throughput(plain, ns: list[int], reps: int, prompt_len: int = 64, new: int = 32) -> float | None:
    print(f"\n1. throughput: {prompt_len}-token prompts, {new} new tokens, all arriving at once, block sharing off, "
          f"page 32, max_batch_tokens 1024")
    ratio8 = None
    for n in ns:
        ids = windows(plain.tokenizer, n, prompt_len)
        reqs = [Request(f"r{i}", "(token ids)", new) for i in range(n)]
        cb_tps, seq_tps, ratios, decode_ms, prefill_ms, gap_ms, batch = [], [], [], [], [], [], []
        for rep in range(reps):
            if rep % 2 == 0:
                res = engine_run(plain, reqs, ids)
                s_tps, s_toks = one_at_a_time(plain, ids, new)
            else:
                s_tps, s_toks = one_at_a_time(plain, ids, new)
                res = engine_run(plain, reqs, ids)
            assert sum(len(r.token_ids) for r in res.requests) == s_toks, "the engine and generate made different tokens"
            cb_tps.append(res.tokens_per_s)
            seq_tps.append(s_tps)
            ratios.append(res.tokens_per_s / s_tps)
            for a, b in zip(res.steps, [*res.steps[1:], None]):
                dur = (a.t_s - a.start_s) * 1e3
                if a.prefill:
                    prefill_ms.append(dur)
                elif a.decode:
                    decode_ms.append(dur)
                    batch.append(len(a.decode))
                if b is not None:
                    gap_ms.append((b.start_s - a.t_s) * 1e3)
        print(f"N={n:2d}: continuous batching {med_spread(cb_tps, '{:.1f}')} tok/s, one at a time "
              f"{med_spread(seq_tps, '{:.1f}')} tok/s, ratio {med_spread(ratios)}; engine: "
              f"prefill steps {len(prefill_ms) // reps}× median {statistics.median(prefill_ms):.0f} ms, "
              f"decode steps median {statistics.median(decode_ms):.0f} ms with {statistics.median(batch):.0f} requests, "
              f"gap between steps median {statistics.median(gap_ms):.1f} ms", flush=True)
        if n == 8:
            ratio8 = statistics.median(ratios)
            print(f"ratio_cb_8={ratio8:.2f} (spread {min(ratios):.2f}–{max(ratios):.2f}, {reps} reps; target ≥ 2: "
                  f"{'met' if ratio8 >= 2 else 'MISSED'})", flush=True)
    return ratio8


def prefix(plain, reps: int, k: int, shared_len: int = 300, new: int = 4, page: int = 32) -> float:
    tok = plain.tokenizer
    system = tok(SYSTEM)["input_ids"][:shared_len]
    assert len(system) == shared_len
    ids = [system + tok(" " + q)["input_ids"][:16] for q in QUESTIONS[:k]]
    reqs0 = [Request(f"q{i}", "(token ids)", new) for i in range(k)]
    # how long one request takes alone without sharing: the arrivals are spaced so that none waits for another
    one = serving.run_workload(plain, reqs0[:1], prompt_ids=ids[:1], page_size=page, prefix_sharing=False, solo=False)
    gap = round(1.5 * one.requests[0].e2e_s + 0.2, 2)
    reqs = [Request(r.id, r.prompt, r.max_new_tokens, i * gap) for i, r in enumerate(reqs0)]
    print(f"\n2. prefix reuse: {k} requests of {len(ids[0])} tokens sharing a {shared_len}-token system prompt, "
          f"{new} new tokens, arriving every {gap:.2f} s, page {page}")
    on_ttft, off_ttft, ratios, reused = [], [], [], []
    for rep in range(reps):
        runs = {}
        for share in ((True, False) if rep % 2 == 0 else (False, True)):
            runs[share] = serving.run_workload(plain, reqs, prompt_ids=ids, page_size=page, prefix_sharing=share, solo=False)
        assert [r.token_ids for r in runs[True].requests] == [r.token_ids for r in runs[False].requests]
        later_on = [r.ttft_s for r in runs[True].requests[1:]]
        later_off = [r.ttft_s for r in runs[False].requests[1:]]
        on_ttft += later_on
        off_ttft += later_off
        ratios.append(statistics.median(later_on) / statistics.median(later_off))
        reused += [r.reused_prompt_tokens for r in runs[True].requests[1:]]
        waits = [r.queue_s for res in runs.values() for r in res.requests]
        if max(waits) > 0.05:
            print(f"  note: a request waited {max(waits) * 1e3:.0f} ms before its first step (the arrivals overlap)")
    print(f"TTFT of requests 2…{k}: with sharing {med_spread([t * 1e3 for t in on_ttft], '{:.0f}')} ms, without "
          f"{med_spread([t * 1e3 for t in off_ttft], '{:.0f}')} ms; prompt tokens reused per request: "
          f"{sorted(set(reused))} of {len(ids[0])}")
    r = statistics.median(ratios)
    print(f"ratio_prefix_ttft={r:.2f} (spread {min(ratios):.2f}–{max(ratios):.2f}, {reps} reps; target ≤ 0.6: "
          f"{'met' if r <= 0.6 else 'MISSED'})", flush=True)
    return r


def editor(ns=(200, 2000)) -> float:
    print("\n3. a crafted editor message: refused before it is applied, against applying it")
    reqs, ratio = workloads.preset("rag"), 0.0
    for n in ns:
        message = json.dumps({"edited_rows": {}, "deleted_rows": [],
                              "added_rows": [{"id": f"x{i}", "prompt": "Hello " * 50, "max_new_tokens": 4} for i in range(n)]})
        t = time.perf_counter()
        try:
            serving.check_edits(json.loads(message), len(reqs))
        except serving.WorkloadError as e:
            refused, t_refuse = e.code, time.perf_counter() - t
        df = pd.DataFrame([r.to_json() for r in reqs])
        schema = determine_dataframe_schema(df, pa.Schema.from_pandas(df))
        t = time.perf_counter()
        data_editor._apply_row_additions(df, json.loads(message)["added_rows"], schema)
        t_apply = time.perf_counter() - t
        ratio = t_apply / t_refuse
        print(f"  {n:,} rows: refused ({refused}) in {t_refuse * 1e3:.1f} ms; the editor applies them in {t_apply:.2f} s "
              f"({len(df):,} rows)")
    print(f"ratio_editor_{ns[-1]}={ratio:.0f} (applying ÷ refusing, one run each)", flush=True)
    return ratio


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="N = 1 and 8, 2 reps, 3 prefix requests")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--editor", action="store_true", help="only part 3 (no model)")
    a = ap.parse_args()
    if a.editor:
        editor()
        return 0
    reps = a.reps or (2 if a.quick else 3)
    ns = [1, 8] if a.quick else [1, 4, 8, 16]
    t = time.perf_counter()
    loaded = load_model(a.model)
    plain = serving.plain_model(loaded)
    print(f"model {loaded.facts.name}, transformers continuous batching, torch threads {torch.get_num_threads()}, "
          f"{reps} reps")
    serving.solo_generate(plain, plain.tokenizer("Warm up")["input_ids"], 2)  # warm-up
    throughput(plain, ns, reps)
    prefix(plain, reps, 3 if a.quick else 4)
    editor()
    print(f"\n({time.perf_counter() - t:.0f} s in all)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
