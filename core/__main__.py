"""Command line: ``python -m core trace "PROMPT" -o out.npz [--model PATH] [--chat]``
and ``python -m core generate "PROMPT" --steps N -o gen.npz [--model PATH] [--chat]``."""

from __future__ import annotations

import argparse
import sys

from core import backends
from core.backends import load_model
from core.engine.trace import MAX_TOKENS
from core.engine.types import EmptyPromptError, ModelLoadError, UnsupportedArchitectureError
from core.gen.generate import cli_main


def trace_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m core trace", description="Trace one forward pass and save it as .npz")
    ap.add_argument("prompt")
    ap.add_argument("-o", "--out", default="trace.npz")
    ap.add_argument("--model", default=None, help="a local HF folder, an HF cache id, or 'toy' (default: embedded SmolLM2)")
    ap.add_argument("--chat", action="store_true", help="apply the chat template")
    ap.add_argument("--max-tokens", type=int, default=None)
    a = ap.parse_args(argv)

    try:
        loaded = load_model(a.model)
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "trace":
        return trace_main(rest)
    if cmd == "generate":
        return cli_main(rest)
    print(f"unknown command '{cmd}'\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
