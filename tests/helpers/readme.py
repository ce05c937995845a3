"""Helpers shared by the tiers of test_readme's tests (tests/*/test_readme*.py)."""

from __future__ import annotations

import re

from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
SHAPE_COMMENT = re.compile(r"^(?P<expr>[^#=]+?)\s+#\s*(?P<shape>\((?:\d+,\s*)*\d+,?\))")


def blocks(lang: str) -> list[str]:
    """The README's fenced code blocks of ``lang``, in order."""
    return [m.group(1) for m in re.finditer(rf"^```{lang}\n(.*?)^```", README, flags=re.S | re.M)]


def command_lines() -> list[str]:
    """The bash blocks' lines, backslash continuations joined and comments dropped."""
    out = []
    for block in blocks("bash"):
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
