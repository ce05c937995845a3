"""The CLI (``python -m core trace|generate``) never lets an exception out (issue 15, section 4).

Arguments and the output path are checked before any model loads; every refusal is one line,
``error: <sentence>``, exit code 2; the file written is exactly the path given; ``generate`` shows
progress on stderr, caps ``--steps`` at what the model's context leaves, and Ctrl-C saves the
tokens generated so far (exit 130)."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
import time

import numpy as np

from conftest import ROOT

PROGRESS = re.compile(r"^(\d+)/(\d+) tokens, [\d.]+ s$")


def test_ctrl_c_saves_the_tokens_so_far(tmp_path):
    """A subprocess on the embedded model (8192 positions: minutes of decoding on a CPU): after a few
    progress lines, SIGINT → exit 130, the .npz holds the tokens so far, stop_reason "interrupted"."""
    out = tmp_path / "g.npz"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([str(ROOT / ".venv" / "bin" / "python"), "-m", "core", "generate", "Once upon a time",
                          "--steps", "100000", "-o", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    err: list[str] = []

    def read() -> None:
        for ln in p.stderr:
            err.append(ln)
            lines.put(ln.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    progress: list[int] = []
    deadline = time.monotonic() + 300
    try:
        while len(progress) < 3:
            ln = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            m = PROGRESS.match(ln)
            if m:
                progress.append(int(m.group(1)))
        p.send_signal(signal.SIGINT)
        p.wait(timeout=300)  # not communicate(): it would race the reader thread for stderr's last lines
        stdout = p.stdout.read()  # a few lines: the pipe cannot fill
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    reader.join(timeout=10)
    stderr = "".join(err)
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr
    with np.load(out) as z:
        meta = json.loads(str(z["meta"]))
        n = len(z["token_ids"])
        assert len(z["tokens"]) == len(z["step_seconds"]) == len(z["kv_tokens"]) == n
    assert meta["stop_reason"] == "interrupted"
    assert progress[-1] <= n < meta["steps_at_most"]
    assert f"interrupted: saved the {n} tokens generated so far to {out}" in stderr
    assert f"wrote {out}" in stdout
