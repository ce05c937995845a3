"""Every example in the README runs as written, so none can rot.

The README's command lines (``.venv/bin/python -m core …``) run in a scratch folder laid out like the
repository (``core``, ``assets`` and ``.venv`` linked in), in the README's order, so the notebook block that
reads ``trace.npz`` finds the file the command before it wrote. Its Python blocks then run in a fresh
interpreter each, as a notebook would, and a line that ends in a shape comment (``x.shape  # (30, 9, 5, 5)``)
must give that shape. Two kinds of line are not run here, for a stated reason: the ``make`` commands and
the ``pytest`` lines (CI runs ``make test``, which is this suite; ``tests/test_proxy.py`` runs what ``make
serve`` runs). The one line that names a placeholder folder (``/path/to/…``) runs with a tiny local model
folder in its place.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
PLACEHOLDER = re.compile(r"/path/to/[^\s]+")
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


def test_every_command_line_is_run_or_says_why_not():
    """A new kind of line (another program, another placeholder) must be given a way to run here."""
    for line in command_lines():
        prog = shlex.split(line)[0]
        assert prog in (".venv/bin/python", "make"), f"the README's line {line!r}: teach tests/test_readme.py to run it"
        if prog == "make":
            assert shlex.split(line)[1] in ("run", "test", "test-fast", "serve"), line


@pytest.fixture(scope="module")
def scratch(tmp_path_factory, tiny_dirs):
    """A folder laid out like the repository root, with every README command line run in it, in order."""
    d = tmp_path_factory.mktemp("readme")
    for name in ("core", "assets"):
        (d / name).symlink_to(ROOT / name)
    venv = ROOT / ".venv"
    if (venv / "bin" / "python").exists():
        (d / ".venv").symlink_to(venv)
    else:  # the suite run from another environment: the README's interpreter is this one
        (d / ".venv" / "bin").mkdir(parents=True)
        (d / ".venv" / "bin" / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        (d / ".venv" / "bin" / "python").chmod(0o755)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    ran = []
    for line in command_lines():
        if not line.startswith(".venv/bin/python") or " -m pytest" in line:
            continue
        line = PLACEHOLDER.sub(str(tiny_dirs["qwen2"]), line)
        p = subprocess.run(line, shell=True, cwd=d, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"README line failed (exit {p.returncode}): {line}\n{p.stderr[-3000:]}"
        ran.append(line)
    assert len(ran) >= 5, ran  # trace ×2, generate, patch, serve-lab
    return d


def test_command_lines_write_what_they_say(scratch):
    for name in ("trace.npz", "t.npz", "gen.npz", "patch.npz", "serving.json"):
        assert (scratch / name).stat().st_size > 0, name


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


@pytest.mark.parametrize("i", range(len(blocks("python"))))
def test_python_block_runs_as_written(scratch, i):
    block = blocks("python")[i]
    code = _checked(block)
    p = subprocess.run([sys.executable, "-c", code], cwd=scratch, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(scratch)})
    assert p.returncode == 0, f"README python block {i} failed:\n{block}\n{p.stderr[-3000:]}"


def test_shape_comments_are_checked():
    """The check above is not vacuous: the notebook block's shape comment is among those turned into assertions."""
    checked = [_checked(b) for b in blocks("python")]
    assert any("assert tuple(tr.attn_pattern.shape) ==" in c for c in checked)
