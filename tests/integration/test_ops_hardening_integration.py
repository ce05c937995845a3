"""Operations, hardening round 2 (issue 29): the CLI's output files and streams (items 7 and 10), the
converted-model cache (item 2), and the address ``make run`` listens on (item 13). The lecture hall's
proxy restarts (item 4) are in tests/browser/test_proxy.py, beside the hall they run on.

* the CLI writes its file atomically (a temporary file beside it, renamed): a write that fails midway
  leaves the old file whole and no temporary file behind;
* a reader that closes the pipe (``… | head -c 10``) costs neither the file nor the exit code, and no
  ``error: BrokenPipeError``; ``-o out/`` is refused as a folder; a prompt that is not UTF-8 (a lone
  surrogate) is one ``error:`` line;
* the converted embedded model carries a manifest (size and sha256): a file of random bytes of the same
  size, a truncated file or a broken manifest is found and rebuilt with one message; a conversion's
  temporary folder whose process is gone is removed, one whose process lives is kept;
* ``make run`` passes 127.0.0.1 unless HOST says otherwise, and the README says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.ops_hardening import _one_error_line

from conftest import ROOT

PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def test_a_device_or_pipe_is_written_in_place(tmp_path):
    """``-o /dev/stdout`` (a pipe here) has no folder to put a temporary file in: it is written as before."""
    p = subprocess.run([PY, "-m", "core", "trace", "hi", "--model", "toy", "-o", "/dev/stdout"], cwd=tmp_path, env=ENV,
                       capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.startswith(b"PK")  # the .npz itself (a zip), then the summary line
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# item 10: closed pipes, folders, text that is not Unicode


def _run_into_closed_pipe(args: list[str], cwd: Path) -> int:
    """The command with stdout and stderr on a pipe whose reader is already gone (what ``2>&1 | head -c 10``
    becomes as soon as head has its 10 bytes): every write raises BrokenPipeError."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([PY, "-m", "core", *args], cwd=cwd, env=ENV, stdout=w, stderr=w, timeout=600)
    finally:
        os.close(w)
    return p.returncode


def test_generate_into_a_closed_pipe_still_writes_its_file(tmp_path):
    """--steps above the toy's context: a note on stderr before the first token (the write that used to
    raise, losing the run); then progress lines, the file, the report."""
    out = tmp_path / "g.npz"
    assert _run_into_closed_pipe(["generate", "Hi", "--model", "toy", "--steps", "1000", "-o", str(out)], tmp_path) == 0
    with np.load(out) as z:
        assert len(z["token_ids"]) > 100


def test_trace_into_a_closed_pipe_exits_quietly(tmp_path):
    out = tmp_path / "t.npz"
    assert _run_into_closed_pipe(["trace", "Hi", "--model", "toy", "-o", str(out)], tmp_path) == 0
    assert out.is_file()


def test_a_pipe_closed_by_head(tmp_path):
    """The shell's own pipeline, as a user types it: the command's exit code and its file."""
    out = tmp_path / "g.npz"
    cmd = (f"set -o pipefail; {PY} -m core generate Hi --model toy --steps 1000 -o {out} 2>&1 | head -c 10; "
           "echo; echo \"rc=${PIPESTATUS[0]}\"")
    p = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert p.stdout.strip().endswith("rc=0"), p.stdout + p.stderr
    assert "BrokenPipe" not in p.stdout + p.stderr
    assert out.is_file()


def test_undecodable_bytes_on_the_command_line(tmp_path):
    """What a terminal in another encoding sends: bytes that are not UTF-8 (Python makes them lone surrogates)."""
    p = subprocess.run([PY.encode(), b"-m", b"core", b"trace", b"caf\xe9", b"--model", b"toy", b"-o", b"x.npz"],
                       cwd=tmp_path, env=ENV, capture_output=True, timeout=600)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 2 and "not valid UTF-8" in _one_error_line(err), err
    assert not (tmp_path / "x.npz").exists()


def _make_run_line(*args: str) -> str:
    out = subprocess.run(["make", "-n", "run", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k not in ("HOST", "MAKEFLAGS")})
    assert out.returncode == 0, out.stderr
    return next(ln for ln in out.stdout.splitlines() if "core.web.server" in ln)


@pytest.mark.skipif(subprocess.run(["which", "make"], capture_output=True).returncode != 0, reason="needs make")
def test_make_run_passes_host_only_when_asked():
    assert "--server.address" not in _make_run_line()  # the server's own default: 127.0.0.1
    assert "--server.address 0.0.0.0" in _make_run_line("HOST=0.0.0.0")


def test_stale_temporary_folders_are_removed_and_a_live_ones_kept(fake_embedded):
    hf, conv, _ = fake_embedded
    conv.parent.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "60"])  # a conversion still running, in another process
    dead = subprocess.Popen(["true"])
    dead.wait()  # a conversion killed midway: its pid is gone
    try:
        live_tmp = conv.with_name(f"{conv.name}.tmp{sleeper.pid}")
        stale_tmp = conv.with_name(f"{conv.name}.tmp{dead.pid}")
        stale_old = conv.with_name(f"{conv.name}.old{dead.pid}")
        other = conv.parent / "notes.tmp"  # not a conversion's: left alone
        for d in (live_tmp, stale_tmp, stale_old):
            d.mkdir()
            (d / "model.safetensors").write_bytes(b"0" * 4096)
        other.write_text("mine")
        hf.load_embedded()
        assert live_tmp.is_dir() and other.is_file()
        assert not stale_tmp.exists() and not stale_old.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
