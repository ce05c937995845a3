"""The weights file under a running server (issue 39): the model's tensors live in the process's own memory,
not in a mapping of the cached safetensors file, so truncating it (SIGBUS) or writing over it (silent NaN)
leaves the running model as it was. Each case runs in a child process: a SIGBUS there cannot stop pytest."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

CHILD = """
import sys, numpy as np, torch
from pathlib import Path
from core.engine import hf
folder, how = Path(sys.argv[1]), sys.argv[2]
model, _ = hf._from_pretrained(folder, use_safetensors=True)
ids = torch.tensor([[1, 2, 3, 4, 5]])
before = model(ids).logits.detach().numpy().copy()
mapped = [l for l in open("/proc/self/maps") if str(folder) in l and ".safetensors" in l]
weights = folder / "model.safetensors"
if how == "truncate":
    with open(weights, "r+b") as f:
        f.truncate(64)
else:
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.seek(size // 2)
        f.write(np.full((size - size // 2) // 4, np.nan, dtype=np.float32).tobytes())
after = model(ids).logits.detach().numpy()
print("mapped", len(mapped), "same", bool(np.array_equal(before, after)), "finite", bool(np.isfinite(after).all()))
"""


@pytest.mark.parametrize("how", ["truncate", "overwrite"])
def test_the_running_model_is_unaffected_by_its_weights_file(tiny_dirs, tmp_path, how):
    folder = tmp_path / "m"
    subprocess.run(["cp", "-r", str(tiny_dirs["llama"]), str(folder)], check=True)
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), how], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                                           "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, f"the model's process died (exit {out.returncode}): {out.stderr[-2000:]}"
    assert out.stdout.split()[-6:] == ["mapped", "0", "same", "True", "finite", "True"], out.stdout
