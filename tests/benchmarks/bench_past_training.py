"""The embedded model past its training length, measured once and shipped: SmolLM2 on the first
1.5 × 8,192 tokens of Python's own help topics (``pydoc_data.topics``), one plain HF forward pass (SDPA
attention, no cache), the loss per bin of 512 positions, and a control (the tokens past the trained length
scored again inside a window of the trained length), written with the machine, torch and its threads, the
date, the model and the time it took to assets/past_training.json, which the long-context page shows.

    .venv/bin/python tests/benchmarks/bench_past_training.py            # print only
    .venv/bin/python tests/benchmarks/bench_past_training.py --write    # and ship it
    .venv/bin/python -m tests.benchmarks.bench_past_training --write    # the same

Several minutes on a 2-core CPU (the attention of 12,288 tokens in each of 30 layers); the losses do not
depend on the machine's load, only the recorded time does (the load average is recorded beside it)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from core import backends
from core.common.paths import asset
from core.engine.types import EMBEDDED_ID
from core.inside import pasttrain
from tests.benchmarks.bench_attention_reference import machine


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write assets/{pasttrain.REFERENCE_FILE}")
    ap.add_argument("--tokens", type=int, default=0, help="document length (default: 1.5 × the trained length)")
    ap.add_argument("--bin", type=int, default=pasttrain.REAL_BIN)
    ap.add_argument("--no-control", action="store_true", help="skip the control window (about 2/3 of the time)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    loaded = backends.load_model(None)
    loaded.model.set_attn_implementation("sdpa")  # a plain HF forward: no recording, PyTorch's fused attention
    trained = int(loaded.facts.max_positions)  # the trained length: SmolLM2's 8k stage
    n = a.tokens or int(1.5 * trained)  # the document: 1.5 times the trained length
    cfg = loaded.model.config
    name = getattr(cfg, "_model_name_or_path", "") or getattr(cfg, "name_or_path", "")
    model = f"{EMBEDDED_ID} (GGUF name: {name}; {loaded.source}); max_position_embeddings {cfg.max_position_embeddings}, rope_theta {cfg.rope_parameters['rope_theta']:g}"
    print(f"{model}\ntrained length {trained:,}, document {n:,} tokens", file=sys.stderr)
    measured = pasttrain.measure_real(loaded, n, trained, width=a.bin, control=not a.no_control,
                                      log=lambda s: print(s, file=sys.stderr, flush=True))
    load1 = os.getloadavg()
    rec = pasttrain.reference_record(measured, f"{machine()}, load average {load0[0]:.1f} at the start and {load1[0]:.1f} at the end",
                                     datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), model, time.perf_counter() - t0)
    bad = pasttrain.check_reference(rec)
    text = json.dumps(rec, indent=1, ensure_ascii=False)
    print(text)
    if bad:
        print(f"not a valid record: {bad}", file=sys.stderr)
        return 1
    if a.write:
        asset(pasttrain.REFERENCE_FILE).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {asset(pasttrain.REFERENCE_FILE)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
