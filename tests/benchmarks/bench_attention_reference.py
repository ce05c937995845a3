"""The attention calculator's quiet reference timing: causal SDPA at the cost tab's lengths, timed by
``core.maths.attention.time_attention`` (interleaved rounds, medians), written with the machine, the
date and the torch version to assets/attention_timing.json, which the cost tab shows beside its live run.

    .venv/bin/python tests/benchmarks/bench_attention_reference.py            # print only
    .venv/bin/python tests/benchmarks/bench_attention_reference.py --write    # and ship it

A run whose spread marks it busy is printed but not written (``--write`` refuses it) unless ``--keep-busy``
is given, and then the file records ``busy`` and the page says so beside the numbers."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from core.common.paths import asset
from core.maths import attention


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, torch threads {torch.get_num_threads()}, {platform.system()} {platform.release()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write assets/attention_timing.json (refused when busy)")
    ap.add_argument("--keep-busy", action="store_true", help="write even a busy run (the file and the page then say it was busy)")
    ap.add_argument("--reps", type=int, default=attention.TIMING_REPS)
    a = ap.parse_args(argv)
    t = attention.time_attention(attention.REFERENCE_LENGTHS, reps=a.reps)
    rec = attention.reference_record(t, machine(), datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), torch.__version__)
    print(json.dumps(rec, indent=1))
    if a.write:
        if rec["busy"] and not a.keep_busy:
            print(f"busy ({rec['n_busy']} lengths with a wide spread): not written", file=sys.stderr)
            return 1
        asset(attention.REFERENCE_FILE).write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {asset(attention.REFERENCE_FILE)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
