"""Cheaper decoding on the embedded model (issue 43): kernels, speculation, precision — the figures the decoding
page shows, printed as ``name=value`` lines, and with ``--write`` shipped as assets/decoding_reference.json (with the
machine, the date and the versions) for the page to draw before any live run.

    .venv/bin/python tests/benchmarks/bench_decoding.py                 # print only
    .venv/bin/python tests/benchmarks/bench_decoding.py --write         # and ship it
    .venv/bin/python tests/benchmarks/bench_decoding.py --n-new 16 --reps 2 --variants Q8_0 bf16   # a short run

Speed-ups are ratios of runs interleaved in this process (plain greedy, assisted, plain, assisted …): the medians
with the smallest and largest pair. ``--shared`` records that other work shared the machine (the page says so).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

import torch
import transformers
from gguf import GGUFReader

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from core import backends
from core.common.paths import asset
from core.engine.hf import embedded_gguf_path
from core.gen import speedups as S


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, torch threads {torch.get_num_threads()}"


def _ratio(t) -> str:
    return "n/a" if t is None else f"{t.median:.3f} (min {t.lo:.3f}, max {t.hi:.3f}, n={t.n})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-new", type=int, default=S.DEFAULT_NEW)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", nargs="*", default=list(S.VARIANTS))
    ap.add_argument("--shared", action="store_true", help="other work shared the machine (recorded, and said on the page)")
    ap.add_argument("--write", action="store_true", help=f"write assets/{S.REFERENCE_FILE}")
    a = ap.parse_args(argv)
    loaded = backends.load_model(None)
    ids = {k: backends.encode_prompt(loaded, p, chat=True).ids for k, p in (("copy", S.COPY_PROMPT), ("free", S.FREE_PROMPT))}
    say = lambda done, total, words: print(f"  … {done}/{total} {getattr(words, 'key', words)}", file=sys.stderr, flush=True)  # noqa: E731

    k = S.kernels(loaded, ids["free"], a.n_new, reps=a.reps, progress=say)
    for name, gap in k.max_abs.items():
        print(f"kernel_max_abs_{name}={gap:.3e}")
    for name in S.KERNELS:
        t = k.timing(name)
        print(f"kernel_ms_per_token_{name}={t.median * 1e3:.1f} (IQR {t.q1 * 1e3:.1f}-{t.q3 * 1e3:.1f}) fork_vs_float64={k.fork[name]}")

    spec: dict[str, dict[str, S.SpecResult]] = {}
    for pk, pid in ids.items():
        spec[pk] = {}
        for m in S.METHODS:
            r = spec[pk][m] = S.speculate(loaded, pid, m, a.n_new, reps=a.reps, progress=say)
            print(f"spec_speedup_{m}[{pk}]={_ratio(r.speedup())}")
            acc = "n/a (nothing drafted)" if r.acceptance is None else f"{r.acceptance:.3f}"
            print(f"spec_acceptance[{m},{pk}]={acc} drafted={r.drafted} passes={r.verify_passes}/{r.plain_passes} "
                  f"same_as_plain={r.same}")

    gguf_bytes = int(sum(int(t.n_bytes) for t in GGUFReader(str(embedded_gguf_path())).tensors))  # the GGUF's tensor bytes
    pr = S.precision(loaded, ids["free"], a.variants, a.n_new, reps=a.reps, gguf_bytes=gguf_bytes, progress=say)
    print(f"baseline_weight_bytes={pr.base_bytes} gguf_q4_1_bytes={gguf_bytes}")
    for v in pr.variants:
        print(f"[{v.name}] kl_mean={v.kl_mean:.4g} top1_agree={v.top1:.3f} fork_at={v.fork} weight_bytes={v.weight_bytes} "
              f"tpot_ratio={_ratio(pr.tpot_ratio(v.name))}")

    ref = S.Reference(machine(), datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                      f"torch {torch.__version__}, transformers {transformers.__version__}", bool(a.shared),
                      {"copy": S.COPY_PROMPT, "free": S.FREE_PROMPT}, k, spec, pr)
    if a.write:
        asset(S.REFERENCE_FILE).write_text(json.dumps(ref.to_dict()) + "\n", encoding="utf-8")
        print(f"wrote {asset(S.REFERENCE_FILE)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
