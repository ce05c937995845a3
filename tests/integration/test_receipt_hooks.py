"""The receipt's confirmations and components (issue 42) against hand-written torch hooks on an untouched HF
eager model (the tiny random models), within float32's own error measured on that run (float64 twin)."""

from __future__ import annotations

import math

import floats
import pytest
import torch
from helpers.receipt import _make

from core import backends
from core.cause import receipt
from core.common.numbers import softmax
from core.engine import roles

ARCHS = ("llama", "qwen2", "mistral", "gpt2")


def _ref_logits(model, ids, hooks=()):
    handles = [m.register_forward_pre_hook(fn) if kind == "pre" else m.register_forward_hook(fn) for m, kind, fn in hooks]
    try:
        with torch.inference_mode():
            return model(input_ids=torch.tensor([list(ids)]), use_cache=False).logits[0, -1].double().numpy()
    finally:
        for h in handles:
            h.remove()


def _component_ref(model, neutral_ids, ids, comp, head_dim):
    """The original run with one component's output at the last position taken from the neutral run, by hand."""
    s = roles.find_sites(model)
    if comp.kind == "head":
        module, kind = roles.out_proj(s.attns[comp.layer]), "pre"
        cols = slice(comp.head * head_dim, (comp.head + 1) * head_dim)
    else:
        module, kind, cols = s.mlps[comp.layer], "out", slice(None)
    seen = {}

    def grab(_m, a, out=None):
        seen["x"] = (a[0] if kind == "pre" else (out[0] if isinstance(out, tuple) else out)).clone()

    def put_pre(_m, a):
        x = a[0].clone()
        x[0, -1, cols] = seen["x"][0, -1, cols]
        return (x, *a[1:])

    def put_out(_m, _a, out):
        x = (out[0] if isinstance(out, tuple) else out).clone()
        x[0, -1, cols] = seen["x"][0, -1, cols]
        return (x, *out[1:]) if isinstance(out, tuple) else x

    _ref_logits(model, neutral_ids, [(module, kind, grab if kind == "pre" else (lambda m, a, o: grab(m, a, o)))])
    return _ref_logits(model, ids, [(module, kind, put_pre if kind == "pre" else put_out)])


def _p_bound(r32, r64, token, extra):
    """How far a probability may lie from the exact one when its logits lie within float32's measured error:
    |log p − log p64| ≤ 2a, so |p − p64| ≤ p64 (e^{2a} − 1)."""
    a = max(floats.allowed_error(r32, r64), extra)
    p64 = softmax(r64)[token]
    return p64, p64 * math.expm1(2 * a) + 1e-15


@pytest.mark.parametrize("arch", ARCHS)
def test_confirmations_and_components_equal_hand_written_hooks(tiny_loaded, eager_refs, arch):
    loaded = tiny_loaded[arch]
    tr = backends.trace(loaded, "The cat sat on the mat because it was")
    rc = _make(loaded, tr)
    ids = tr.token_ids.tolist()
    tok = rc.token_id
    m32, m64 = eager_refs[arch].model("float32"), eager_refs[arch].model("float64")
    # float32's own error on this model and prompt: a batched, cache-reusing patched run is held to it
    pair = max(floats.allowed_error(_ref_logits(m32, ids), _ref_logits(m64, ids)), 0.0)
    assert rc.read is not None and rc.read.sources and rc.carried
    neutral = list(ids)
    for s in rc.read.sources:
        neutral[s.pos] = rc.read.neutral_id
        swapped = list(ids)
        swapped[s.pos] = rc.read.neutral_id
        p64, bound = _p_bound(_ref_logits(m32, swapped), _ref_logits(m64, swapped), tok, pair)
        floats.assert_within(s.p_after, p64, bound, f"{arch} source {s.pos}", "float32's error on these logits")
    p64, bound = _p_bound(_ref_logits(m32, neutral), _ref_logits(m64, neutral), tok, pair)
    floats.assert_within(rc.read.p_all_removed, p64, bound, f"{arch} all sources", "float32's error")
    p64, bound = _p_bound(_ref_logits(m32, ids), _ref_logits(m64, ids), tok, pair)
    floats.assert_within(rc.read.p, p64, bound, f"{arch} unpatched", "float32's error")
    dh = loaded.facts.head_dim
    for c in rc.carried:
        r32, r64 = (_component_ref(m, neutral, ids, c, dh) for m in (m32, m64))
        p64, bound = _p_bound(r32, r64, tok, 4 * pair)
        floats.assert_within(c.p_after, p64, bound, f"{arch} {c}", "float32's error, batched runs after cached keys")
        assert c.dp == c.p_after - rc.read.p
        if c.kind == "head":  # its attention from this position: the trace's own row
            row = backends.attention(loaded, tr, c.layer)[c.head, rc.pos]
            assert [(j, w) for j, _, w in c.attends] == [(j, float(row[j])) for j, _, _ in c.attends]
            assert c.attends[0][2] == float(row.max())
    # the confirmation rule, read off the numbers
    for s in rc.read.sources:
        assert s.confirmed == ((s.dp < 0 if s.score > 0 else s.dp > 0) and abs(s.dp) >= receipt.CONFIRM * rc.read.p)
    assert rc.forward_passes > 0 and rc.rows_positions > 0
