"""Every example in the README and in docs/*.md runs as written, so none can rot.

Their command lines (``.venv/bin/python -m core …``) run in a scratch folder laid out like the
repository (``core``, ``assets`` and ``.venv`` linked in), the README's first, then each page of docs/ in
order, so the block that reads ``trace.npz`` finds the file a command wrote. Their Python blocks then run in a fresh
interpreter each, as a notebook would, and a line that ends in a shape comment (``x.shape  # (30, 9, 5, 5)``)
must give that shape. Two kinds of line are not run here, for a stated reason: the ``make`` commands and
the ``pytest`` lines (CI runs ``make test``, which is this suite; ``tests/browser/test_proxy.py`` runs what ``make
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
from helpers.readme import _checked, blocks, command_lines

from conftest import ROOT

PLACEHOLDER = re.compile(r"/path/to/[^\s]+")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory, tiny_dirs):
    """A folder laid out like the repository root, with every command line of the README and docs/ run in it, in order."""
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
        assert p.returncode == 0, f"README/docs line failed (exit {p.returncode}): {line}\n{p.stderr[-3000:]}"
        ran.append(line)
    assert len(ran) >= 5, ran  # trace ×2, generate, patch, serve-lab
    return d


def test_command_lines_write_what_they_say(scratch):
    for name in ("trace.npz", "t.npz", "gen.npz", "patch.npz", "serving.json"):
        assert (scratch / name).stat().st_size > 0, name


@pytest.mark.parametrize("page, block", blocks("python"), ids=[f"{page}-{i}" for i, (page, _) in enumerate(blocks("python"))])
def test_python_block_runs_as_written(scratch, page, block):
    code = _checked(block)
    p = subprocess.run([sys.executable, "-c", code], cwd=scratch, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(scratch)})
    assert p.returncode == 0, f"{page}'s python block failed:\n{block}\n{p.stderr[-3000:]}"
