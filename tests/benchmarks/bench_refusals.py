"""Benchmark: how long the refusals take (the CLI's, the loading guard's) and a warm start of the model.

    PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_refusals.py [--reps 20] [--load-reps 5]

The tests prove what these refusals do without a clock (the CLI refuses a bad argument or output path
before any model loads: tests/unit/test_cli.py's ``no_model``; the loader refuses a config too big for the
budget before it looks for a weight file, and a config beside one unrelated tensor before it builds the
model: tests/unit/test_loading_guard.py's ``weight_reads``; a warm start reads the converted safetensors and
never converts the GGUF again: tests/integration/test_models_integration.py). How long they take depends on the machine and on
what else runs on it, so it is measured here, where a busy machine shows as a wide spread rather than a
failed test. Each is run once untimed, then ``--reps`` times (``--load-reps`` for the warm start); the
median is printed with its interquartile range and min–max (``core.common.timing``).

Printed, one ``name=value`` line each (milliseconds; the bound the tests used to assert in brackets):
``cli_bad_argument_ms`` (``generate --top-p 0``, [2 s]), ``cli_bad_path_ms`` (``-o`` in a missing
folder, [2 s]), ``guard_budget_ms`` (a 1.27 B-parameter config.json alone, over a 4 GB budget, [10 s]),
``guard_coverage_ms`` (the same config beside one unrelated tensor, within the budget, [30 s]) and
``warm_load_ms`` (the embedded SmolLM2 from its converted safetensors, [3 s]).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import core.__main__ as cli  # noqa: E402 - the project root first
from core.backends import load_model  # noqa: E402
from core.common import settings, timing  # noqa: E402
from core.engine.types import ModelLoadError  # noqa: E402
from tests.unit.test_loading_guard import BIG_LLAMA  # noqa: E402 - the tests' 1.27 B-parameter config


def cli_refusal(argv: list[str]) -> Callable[[], None]:
    """One CLI run that must be refused (exit code 2), its one-line error kept off the terminal."""
    def run() -> None:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            rc = cli.main(argv)
        if rc != 2:
            raise SystemExit(f"bench_refusals: {argv} was not refused (rc={rc}): {err.getvalue()}")
    return run


def load_refusal(folder: Path, budget_gb: str, code: str) -> Callable[[], None]:
    """One load of ``folder`` under a budget of ``budget_gb``, which must be refused with ``code``."""
    def run() -> None:
        os.environ[settings.MEMORY_BUDGET_GB] = budget_gb
        settings.reload()  # read once per process: read again for this budget (microseconds)
        try:
            load_model(str(folder))
        except ModelLoadError as e:
            if e.code != code:
                raise SystemExit(f"bench_refusals: {folder} was refused as {e.code}, not {code}: {e}") from None
            return
        raise SystemExit(f"bench_refusals: {folder} was loaded, not refused")
    return run


def line(name: str, t: timing.Timing) -> str:
    ms = 1e3
    return (f"{name}={t.median * ms:.2f}  (median of {t.n}; IQR {t.q1 * ms:.2f}–{t.q3 * ms:.2f}, "
            f"min–max {t.lo * ms:.2f}–{t.hi * ms:.2f} ms{'; busy machine' if t.busy else ''})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20, help="timed runs of each refusal")
    ap.add_argument("--load-reps", type=int, default=5, help="timed warm starts of the embedded model")
    a = ap.parse_args()
    saved = os.environ.get(settings.MEMORY_BUDGET_GB)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        only_config, one_tensor = t / "only_config", t / "one_tensor"
        for folder in (only_config, one_tensor):
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(BIG_LLAMA))
        save_file({"unrelated.weight": torch.zeros(8)}, str(one_tensor / "model.safetensors"), metadata={"format": "pt"})
        runs = {
            "cli_bad_argument_ms": cli_refusal(["generate", "hi", "--top-p", "0", "--model", "toy", "-o", str(t / "x.npz")]),
            "cli_bad_path_ms": cli_refusal(["trace", "hi", "--model", "toy", "-o", str(t / "missing" / "x.npz")]),
            "guard_budget_ms": load_refusal(only_config, "4", "too_big"),
            "guard_coverage_ms": load_refusal(one_tensor, "1000", "coverage"),
        }
        try:
            for name, fn in runs.items():
                print(line(name, timing.repeat(fn, reps=a.reps, warmup=1)[0]), flush=True)
        finally:
            if saved is None:
                os.environ.pop(settings.MEMORY_BUDGET_GB, None)
            else:
                os.environ[settings.MEMORY_BUDGET_GB] = saved
            settings.reload()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar, once per load
    # the warm-up load converts the GGUF on a fresh machine; the timed ones read the converted safetensors
    warm, _ = timing.repeat(lambda: load_model(None), reps=a.load_reps, warmup=1)
    print(line("warm_load_ms", warm), flush=True)


if __name__ == "__main__":
    main()
