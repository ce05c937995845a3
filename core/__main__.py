"""Command line: ``python -m core trace "PROMPT" -o out.npz [--model PATH] [--chat]``
and ``python -m core generate "PROMPT" --steps N -o gen.npz [--model PATH] [--chat]``."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from core import backends
from core.engine.trace import MAX_TOKENS
from core.engine.types import EmptyPromptError, ModelLoadError, UnsupportedArchitectureError
from core.gen import generate
from core.gen.sampling import SamplingConfig


def trace_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m core trace", description="Trace one forward pass and save it as .npz")
    ap.add_argument("prompt")
    ap.add_argument("-o", "--out", default="trace.npz")
    ap.add_argument("--model", default=None, help="a local HF folder, an HF cache id, or 'toy' (default: embedded SmolLM2)")
    ap.add_argument("--chat", action="store_true", help="apply the chat template")
    ap.add_argument("--max-tokens", type=int, default=None)
    a = ap.parse_args(argv)

    try:
        loaded = backends.load_model(a.model)
        tr = backends.trace(loaded, a.prompt, chat=a.chat, max_tokens=a.max_tokens or MAX_TOKENS)
        backends.export_npz(loaded, tr, a.out)
    except (ModelLoadError, EmptyPromptError, UnsupportedArchitectureError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for n in tr.notes:
        print(f"note: {n}", file=sys.stderr)
    print(f"{a.out}: {tr.n_tokens} tokens, {tr.n_layers} layers, {tr.n_heads} heads; keys: "
          "tokens token_ids embeddings resid attn_out mlp_out q k v attn_pattern final_hidden logits meta")
    return 0


def generate_main(argv: list[str]) -> int:
    """``python -m core generate "PROMPT" --steps N -o gen.npz [--model PATH] [--chat] …``"""
    p = argparse.ArgumentParser(prog="python -m core generate", description="Prefill + decode with a KV cache, timed step by step.")
    p.add_argument("prompt")
    p.add_argument("--steps", type=int, default=16, help="new tokens at most (the prefill's included)")
    p.add_argument("-o", "--output", default="gen.npz")
    p.add_argument("--model", default=None, help="local model folder (default: the embedded SmolLM2)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt with the chat template")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be at least 1")
    greedy = a.temperature is None or a.temperature <= 0
    if greedy:
        cfg = generate.greedy_config()
    else:
        cfg = SamplingConfig(temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, seed=a.seed)
    try:
        loaded = backends.load_model(a.model)
        rec = generate.generate_record(loaded, a.prompt, a.steps, cfg, chat=a.chat)
    except (ModelLoadError, EmptyPromptError, ValueError) as e:
        print(f"error: {e}")
        return 2
    np.savez(a.output, **rec)
    n = len(rec["token_ids"])
    tp = rec["step_seconds"][1:]
    print(f"{n} tokens, stop: {json.loads(str(rec['meta']))['stop_reason']}; TTFT {rec['prefill_seconds'] * 1e3:.1f} ms"
          + (f", median TPOT {np.median(tp) * 1e3:.1f} ms" if len(tp) else ""))
    print(f"KV cache at the end: {int(rec['kv_tokens'][-1])} positions, {int(rec['kv_bytes'][-1]):,} bytes")
    print(f"text: {str(rec['text'])!r}")
    print(f"wrote {a.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "trace":
        return trace_main(rest)
    if cmd == "generate":
        return generate_main(rest)
    print(f"unknown command '{cmd}'\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
