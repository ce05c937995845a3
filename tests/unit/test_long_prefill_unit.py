"""A long prompt's continuation starts from the trace, not from a second prefill (issue 28).

Above ``hf_trace.KV_KEEP_MAX`` tokens a trace keeps no keys and values (memory); the journey's loop then
forms them again from the trace's kept residual stream, each layer's projections only
(``hf_trace.prompt_kv``). Bound lowered here so that a short prompt takes the long prompts' route."""

from __future__ import annotations

import pytest
from helpers.long_prefill import _same_cache

from core import backends


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_tiny_families_too(tiny_loaded, arch, short_bound):
    if arch not in tiny_loaded:
        pytest.skip(f"no tiny {arch}")
    loaded = tiny_loaded[arch]
    ids = list(range(3, 40))
    tr = backends.trace_ids(loaded, ids)
    kept = backends.prompt_prefill(loaded, tr)
    assert kept is not None
    _same_cache(kept.cache, backends.forward_step(loaded, ids).cache)
