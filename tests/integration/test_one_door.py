"""One door to every recorded site (issue 38): ``Trace.site(name, layer)`` keyed by the registry, and the web
cache's memoised ``site(tr, name, layer)`` giving the very same arrays, derived once per (trace, layer)."""

from __future__ import annotations

import numpy as np
import pytest

import core.backends as backends
from core.engine import trace as T
from core.web import cache

PROMPT = "kqzmwpkqzmw, one door"


def test_every_row_of_the_registry_answers_through_the_toys_door():
    toy = backends.load_model("toy")
    tr = backends.trace(toy, PROMPT)
    for row in T.SITES:
        if row.kind in (T.DERIVED, T.CAPTURE):  # not kept by a trace: refused, naming where it comes from
            with pytest.raises(KeyError, match=row.name):
                tr.site(row.name, 0)
            continue
        whole = tr.site(row.name)
        if row.shape.startswith("L"):  # per layer (or per block boundary): a layer is a slice of the stack
            np.testing.assert_array_equal(tr.site(row.name, 1), whole[1], err_msg=row.name)
    with pytest.raises(KeyError, match="not a recorded site"):
        tr.site("weights", 0)  # the old name of attn_pattern has no reader, and no door


def test_the_caches_door_is_the_traces_and_derives_each_layer_once(tiny_dirs, monkeypatch):
    spec = str(tiny_dirs["llama"])
    tr = cache.get_trace(spec, PROMPT, False)
    fresh = backends.trace(cache.get_model(spec), PROMPT)  # the same prompt traced again: same route → same bits
    assert tr.key == (spec, PROMPT, False, T.MAX_TOKENS) and tr.model_spec == spec
    names = (*T.LAYER_SITES, "gate_act")  # an MLP site: derived when asked by name, no flag
    want = {(name, layer): fresh.site(name, layer) for name in names for layer in range(tr.n_layers)}
    real, asked = backends.hf_trace.mlp_sites, []

    def counted(loaded, tr_, layer):
        asked.append(layer)
        return real(loaded, tr_, layer)

    monkeypatch.setattr(backends.hf_trace, "mlp_sites", counted)
    for layer in range(tr.n_layers):
        assert not cache.has_site(tr, "q", layer)
        for name in names:
            np.testing.assert_array_equal(cache.site(tr, name, layer), want[name, layer], err_msg=f"{name} L{layer}")
        assert cache.has_site(tr, "q", layer) and cache.has_site(tr, "gate_act", layer)
        cache.site(tr, "gate_act", layer)
    assert asked == list(range(tr.n_layers))  # each layer's MLP replayed once, then read from the store
    assert tr.__dict__["_derived"] == {}  # the shared trace never grew: the store holds the layers
    with pytest.raises(ValueError, match="one layer at a time"):
        cache.site(tr, "attn_pattern")
