"""The loader refuses what it cannot show honestly (issue 15, section 2, and the loader side of
section 1): missing or unexpected weights, a model bigger than the server's memory budget (decided
from config.json before anything is allocated), and it never tells whether a path exists."""

from __future__ import annotations

import json

from core.engine import budget
from core.engine.hf import converted_dir, embedded_gguf_path

# ---------------------------------------------------------------------------------------------
# the parameter count from config.json alone


def test_estimate_matches_smollm2(smol):
    cfg = json.loads((converted_dir(embedded_gguf_path()) / "config.json").read_text())
    assert budget.n_params(cfg) == budget.n_params(smol.model.config) == smol.model.num_parameters() == 134_515_008
