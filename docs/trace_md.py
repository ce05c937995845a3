"""Writes docs/trace.md from the site registry, ``core.engine.trace.SITES``: ``.venv/bin/python docs/trace_md.py``.
The page is never edited by hand; tests/unit/test_docs.py fails when it differs from what this writes."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.engine import trace as T  # noqa: E402 - the project root first

PAGE = ROOT / "docs" / "trace.md"

# what each kind of row means, in the registry's words (core/engine/trace.py); a kind missing here is printed as is
KINDS = {
    T.KEPT: "Kept: the trace holds it, for the real model and the toy alike.",
    T.LAYER: "Per layer: derived on demand by replaying that block (the real model; k and v are kept up to a bound), "
             "kept by the toy; `tr.<name>` stacks every layer.",
    T.MLP: "Inside the MLP: derived on demand by replaying that layer's MLP (a model whose MLP has no such part leaves "
           "it out), kept by the toy.",
    T.DERIVED: "Derived: recomputed from a kept site when asked (the full logits, from `final_hidden`, for the export).",
    T.CAPTURE: "Captured only by the engine's site capture, for activation patching.",
    T.TOY: "Kept only by the toy: every intermediate value its one-file model computes.",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else "—"


def _row(s: T.Site) -> str:
    return f"| `{s.name}` | [{s.shape.replace(',', ', ')}] | {s.dtype} | {_cell(s.meaning)} | {_cell(s.tl)} |"


HEAD = "| name | shape | dtype | meaning | TransformerLens |\n|---|---|---|---|---|"


def render() -> str:
    exported = [s for s in T.SITES if s.export]
    kinds = list(dict.fromkeys(s.kind for s in T.SITES))
    out = [
        "# The trace format",
        "",
        "<!-- Written by docs/trace_md.py from core.engine.trace.SITES; do not edit (tests/unit/test_docs.py). -->",
        "",
        "Every picture reads one record of a real forward pass, a `Trace` (`core/engine/trace.py`). Every array a "
        f"trace records, kept or derived, is one row of the site registry `core.engine.trace.SITES` ({len(T.SITES)} "
        "rows): this page is that registry. Shapes are symbolic: T tokens, L layers, d the stream's width, H query "
        "heads, Hkv KV heads, dh a head's width, F the MLP's width, V the vocabulary. TransformerLens' name is given "
        "where it has one ({l} the layer).",
        "",
        "## The .npz file",
        "",
        'Download it from a page ("Download trace (.npz)") or from the command line ([cli.md](cli.md)). Its keys, '
        "in this order:",
        "",
        HEAD,
        *(_row(s) for s in exported),
        "| `meta` | — | JSON string | model facts (layers, heads, KV heads, head_dim, …), prompt, settings | — |",
        "",
        f"`attn_pattern` is left out above {T.PATTERN_EXPORT_MAX:,} tokens (`meta[\"omitted\"]` says so; derive any "
        "layer with `core.layer_detail`).",
        "",
        "```bash",
        '.venv/bin/python -m core trace "苹果很好吃。" -o trace.npz',
        "```",
        "",
        "```python",
        "import json, numpy as np",
        'z = np.load("trace.npz")',
        'meta = json.loads(str(z["meta"]))',
        "print(meta[\"facts\"][\"n_layers\"], z[\"tokens\"])           # 30 ['⟨E8⟩' '⟨8B⟩' '⟨B9⟩' '果' …]",
        'h = 0; print(z["attn_pattern"][5, h].round(2))          # layer 5, head 0; reads KV head h // 3',
        "```",
        "",
        "## Every site, by where it lives",
    ]
    for kind in kinds:
        out += ["", f"### {kind}", "", KINDS.get(kind, kind), "", HEAD, *(_row(s) for s in T.SITES if s.kind == kind)]
    return "\n".join(out) + "\n"


def main() -> None:
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} ({len(T.SITES)} sites)")


if __name__ == "__main__":
    main()
