"""The code blocks of the README and of docs/*.md, for the tests that run them (tests/*/test_readme*.py)."""

from __future__ import annotations

import re

from conftest import ROOT

# the README, then every page of docs/, in the order their command lines run
PAGES = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
         for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
SHAPE_COMMENT = re.compile(r"^(?P<expr>[^#=]+?)\s+#\s*(?P<shape>\((?:\d+,\s*)*\d+,?\))")


def blocks(lang: str) -> list[tuple[str, str]]:
    """(page, code) for every fenced code block of ``lang`` in the README and docs/, in order."""
    return [(page, m.group(1)) for page, text in PAGES.items() for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)]


def command_lines() -> list[str]:
    """The bash blocks' lines, backslash continuations joined and comments dropped."""
    out = []
    for _, block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line:
                out.append(line)
    return out


def _checked(block: str) -> str:
    """The block with every shape comment turned into an assertion."""
    out = []
    for line in block.splitlines():
        m = SHAPE_COMMENT.match(line)
        if m and "print(" not in line:
            expr, shape = m.group("expr").strip(), m.group("shape")
            line = f"assert tuple({expr}) == {shape}, f'README says {expr} is {shape}, it is {{tuple({expr})}}'"
        out.append(line)
    return "\n".join(out)
