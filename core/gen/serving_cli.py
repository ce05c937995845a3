"""``python -m core serve-lab WORKLOAD.jsonl -o result.json [--model ID|PATH] [--no-prefix-sharing]
[--page-size N] [--blocks N] [--max-batch-tokens N] [--timeout S]``: a workload through transformers' continuous
batching engine on the real model (``core.gen.serving``), saved as JSON.

``core/__main__.py`` registers the command and hands over its helpers (``cli``), so the command line's rules
are written once there: arguments, the workload file and the output path are checked before the model
loads, token lengths before the engine starts; a refusal is one ``error:`` line, exit code 2, nothing
written. A run where the engine served no request writes its report and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import core.backends as backends
from core.engine.types import TOY_ID, say
from core.gen import serving


def _read_workload(raw: str) -> str:
    """The workload file's text, or a ValueError saying in one sentence why it cannot be read."""
    p = Path(raw)
    if not p.exists():
        raise ValueError(f"The workload file {raw} does not exist.")
    if p.is_dir():
        raise ValueError(f"{raw} is a folder; give a .jsonl file with one request per line.")
    try:
        with open(p, "rb") as f:
            data = f.read(serving.MAX_WORKLOAD_BYTES + 1)  # bounded, whatever the file claims to be
    except OSError as e:
        raise ValueError(f"Cannot read {raw}: {e.strerror or e}.") from None
    if len(data) > serving.MAX_WORKLOAD_BYTES:
        raise serving.WorkloadError("too_big", max=serving.MAX_WORKLOAD_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"The workload file {raw} is not UTF-8 text (byte {e.start}).") from None


def _progress(_done: int, _total: int, words: Any = None) -> None:
    """The run's progress on stderr: its words, in English."""
    print(say(words), file=sys.stderr, flush=True)


def main(argv: list[str], cli: Any) -> int:
    """The ``serve-lab`` command; ``cli`` is ``core.__main__`` (its _Parser, CliError, _int_arg,
    check_output, write_output and _run)."""
    p = cli._Parser(prog="python -m core serve-lab",
                    description="Serve a JSONL workload with continuous batching on the real model; save a JSON report.")
    p.add_argument("workload", help="JSONL: one {id, prompt, max_new_tokens, arrival_s, chat} object per line")
    p.add_argument("-o", "--output", dest="out", metavar="OUTPUT", default="result.json",
                   help="the .json file to write (exactly this path)")
    p.add_argument("--model", default=None, help="a local HF folder or an HF cache id (default: embedded SmolLM2)")
    p.add_argument("--no-prefix-sharing", action="store_true", help="turn the engine's block (prefix) sharing off")
    lo, hi = serving.PAGE_SIZE
    p.add_argument("--page-size", type=cli._int_arg("--page-size", lo, hi), default=serving.DEFAULT_PAGE_SIZE,
                   help=f"tokens per cache page ({lo} to {hi}; default {serving.DEFAULT_PAGE_SIZE})")
    lo, hi = serving.BLOCKS
    p.add_argument("--blocks", type=cli._int_arg("--blocks", lo, hi), default=None,
                   help=f"blocks in the pool ({lo} to {hi}, at most {serving.MAX_POOL_BYTES // 2**20} MiB; "
                        "default: the whole workload at once)")
    lo, hi = serving.MAX_BATCH_TOKENS
    p.add_argument("--max-batch-tokens", type=cli._int_arg("--max-batch-tokens", lo, hi),
                   default=serving.DEFAULT_MAX_BATCH_TOKENS,
                   help=f"tokens per forward step ({lo} to {hi}; a longer prefill is chunked)")
    p.add_argument("--timeout", type=cli._int_arg("--timeout", 1, 86_400), default=int(serving.TIMEOUT_S), metavar="S",
                   help=f"stop the run after S seconds (1 to 86400, a day; default {int(serving.TIMEOUT_S)})")

    def check(a: argparse.Namespace) -> None:
        if (a.model or "").strip() == TOY_ID:
            raise cli.CliError(serving.WorkloadError("toy").text("en"))
        try:
            a.requests = serving.parse_workload(_read_workload(a.workload))
        except ValueError as e:  # WorkloadError is one: a sentence naming the line
            raise cli.CliError(str(e)) from None

    def work(a: argparse.Namespace) -> serving.ServeResult:
        loaded = backends.load_model(a.model)
        plain = serving.plain_model(loaded)
        ids = serving.encode_workload(plain.tokenizer, a.requests, plain.facts.max_positions)
        res = serving.run_workload(plain, a.requests, page_size=a.page_size, num_blocks=a.blocks,
                                   max_batch_tokens=a.max_batch_tokens, prefix_sharing=not a.no_prefix_sharing,
                                   prompt_ids=ids, progress=_progress, timeout_s=a.timeout)
        body = (json.dumps(res.to_json(), ensure_ascii=False, indent=1) + "\n").encode("utf-8")
        cli.write_output(a.out, lambda f: f.write(body))
        return res

    def report(a: argparse.Namespace, res: serving.ServeResult) -> int:
        s = res.settings
        print(f"{len(res.requests)} requests, {len(res.steps)} engine steps; pool {s['num_blocks']} blocks of "
              f"{s['page_size']} tokens ({res.memory['pool_bytes_formula']:,} bytes), prefix sharing "
              f"{'on' if s['prefix_sharing'] else 'off'}")
        for r in res.requests:
            mark = "✓" if r.equals_solo else "✗"
            ttft = f"TTFT {r.ttft_s * 1e3:.0f} ms" if r.ttft_s is not None else "no token"
            extra = f", {r.reused_prompt_tokens} prompt tokens reused" if r.reused_prompt_tokens else ""
            extra += f", preempted {r.preemptions}×" if r.preemptions else ""
            print(f"  {mark} {r.id}: {len(r.token_ids)} tokens, {ttft}{extra}"
                  + (f" — {r.outcome}: {r.error}" if r.outcome != "finished" else ""))
        seq = f"{res.sequential_tokens_per_s:.1f}" if res.sequential_tokens_per_s else "–"
        print(f"tokens per second: continuous batching {res.tokens_per_s:.1f}, one request at a time {seq}")
        print(f"wrote {a.out}")
        if not any(r.outcome == "finished" for r in res.requests):  # the report is written; nothing was served
            print(f"error: the engine served none of the {len(res.requests)} requests: {res.refused or res.requests[0].error}. "
                  "A larger pool (--blocks, or leave it out) may fit them.", file=sys.stderr)
            return 1
        if res.refused:
            print(f"note: the engine refused to go on: {res.refused}", file=sys.stderr)
        return 0

    return cli._run(p, argv, check, work, report)
