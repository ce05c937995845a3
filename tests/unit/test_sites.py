"""The one registry of recorded sites (``core.engine.trace.SITES``): every list of sites reads it, and a
site added as one row and one role name (the MLP's gate activation, ``gate_act``) is derived exactly."""

from __future__ import annotations

import dataclasses

import floats
import numpy as np
import pytest
import torch

from core import backends
from core.cause import patching
from core.engine import trace as T
from core.engine.roles import MLP_PARTS

PROMPT = "The capital of France is Paris, and 苹果很好吃。"


def test_every_list_of_sites_reads_the_registry():
    assert len({s.name for s in T.SITES}) == len(T.SITES)  # one row per name
    assert tuple(f.name for f in dataclasses.fields(T.LayerDetail))[1:] == T.LAYER_SITES  # LayerDetail's fields, in order
    trace_fields = {f.name for f in dataclasses.fields(T.Trace)}
    for s in T.SITES:
        assert s.kind in (T.KEPT, T.LAYER, T.MLP, T.DERIVED, T.CAPTURE, T.TOY), s
        assert (s.name in trace_fields) == (s.kind in (T.KEPT, T.LAYER)), s  # the Trace holds kept and layer sites
    # the export's keys, as the README's table has them (the literal lists the registry replaced)
    assert T.ARRAY_KEYS == ("tokens", "token_ids", "embeddings", "resid", "attn_out", "mlp_out", "q", "k", "v",
                            "attn_pattern", "final_hidden")
    assert T.EXPORT_KEYS[-2:] == ("logits", "meta")
    assert set(MLP_PARTS) == set(T.MLP_SITES)  # each MLP row names the part it is read from
    assert set(patching.PATCHED) <= set(T.SITE)


def test_the_toy_probes_only_registry_names():
    toy = backends.load_model("toy")
    tr = backends.trace(toy, "hello world")
    assert set(tr.kept_sites) == {s.name for s in T.SITES if s.kind in (T.TOY, T.MLP)}  # its SwiGLU has a gate
    np.testing.assert_array_equal(backends.mlp_sites(toy, tr, 1)["gate_act"], tr.site("gate_act")[1])
    assert tr.site("gate_act", 1) is not None and tr.site("gate_act", 1).shape == tr.site("gate", 1).shape
    # silu(gate), as the toy computes it before multiplying up: the same route → the same bits
    floats.assert_same(tr.site("gate_act"), torch.nn.functional.silu(torch.from_numpy(np.array(tr.site("gate")))).numpy(), "gate_act")
    d = backends.layer_detail(toy, tr, 1)
    assert d.nbytes == sum(getattr(d, k).nbytes for k in T.LAYER_SITES)


def test_a_model_without_the_part_leaves_the_site_out(tiny_loaded):
    gpt2 = tiny_loaded["gpt2"]  # its MLP has no gate: act(c_fc(x))
    tr = backends.trace(gpt2, PROMPT)
    assert backends.mlp_sites(gpt2, tr, 0) == {}
    with pytest.raises(KeyError, match="gate_act"):
        tr.site("gate_act", 0)
