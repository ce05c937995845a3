"""The "Why this token?" receipt (issue 42) on tiny random models and by hand.

* the rival's temperature interval equals a hand computation (two logit sets solved on paper) and a brute-force
  scan of the whole softmax over a dense grid of temperatures;
* every confirmation (a source's embedding replaced by the neutral token) and every listed component (a head's or
  an MLP's output at this position taken from the neutral run) equals hand-written torch hooks on an untouched
  HF model, within float32's own error measured on that run (float64 twin);
* the lens part equals the logit lens (same route: the same bits), the attribution part equals
  ``attribution.grad_x_input`` (same route), p equals the logits page's softmax;
* a prefix past the budget says which part was bounded, and runs no forward pass; a post-norm toy says which part
  is unavailable.
"""

from __future__ import annotations

import math

import floats
import numpy as np
import pytest
import torch

from core import backends
from core.cause import attribution, receipt
from core.common.numbers import softmax
from core.engine import roles
from core.stream import lens
from core.toy import load_trained
from core.toy.model import ToyConfig, ToyTransformer
from core.toy.run import wrap

ARCHS = ("llama", "qwen2", "mistral", "gpt2")


def _lens(loaded, tr):
    def at(pos, tok):
        k = lens.logit_lens_topk(loaded, tr, receipt.TOP5, lo=pos, hi=pos + 1)
        return k.ids[:, 0], k.probs[:, 0], lens.lens_probs_of(loaded, tr, pos, [tok])[:, 0]
    return at


def _make(loaded, tr, pos=None, token=None):
    pos = tr.n_tokens - 1 if pos is None else pos
    logits = backends.logits_row(loaded, tr, pos)
    return receipt.make(loaded, tr.token_ids.tolist(), pos, logits, _lens(loaded, tr),
                        lambda layer: backends.attention(loaded, tr, layer), token)


# ---------------------------------------------------------------------------------------------
# the temperature, solved exactly


def test_temperature_by_hand():
    # two tokens, logits 3 and 1: p_r = 1 / (1 + e^{2/T}) > 0.1  ⟺  e^{2/T} < 9  ⟺  T > 2 / ln 9, at every higher T
    t_from, t_to, peak, _ = receipt.rival_temperatures(np.array([3.0, 1.0]), 1)
    assert t_from == pytest.approx(2 / math.log(9), rel=1e-12) and math.isinf(t_to) and peak == pytest.approx(0.5)
    # logits 2, 1 and fourteen 0s: with x = e^{1/T}, p_r = x / (x² + x + 14) = 0.1  ⟺  x² − 9x + 14 = 0  ⟺  x ∈ {2, 7}
    z = np.array([2.0, 1.0] + [0.0] * 14)
    t_from, t_to, peak, peak_t = receipt.rival_temperatures(z, 1)
    assert t_from == pytest.approx(1 / math.log(7), rel=1e-12) and t_to == pytest.approx(1 / math.log(2), rel=1e-12)
    # the peak: d/dβ [β − log(e^{2β} + e^β + 14)] = 0  ⟺  e^{2β} = 14  ⟺  x = √14, p = √14 / (14 + √14 + 14)
    assert peak_t == pytest.approx(1 / math.log(math.sqrt(14)), rel=1e-9)
    assert peak == pytest.approx(math.sqrt(14) / (28 + math.sqrt(14)), rel=1e-12)
    # a rival that IS the top token: above 10 % at every temperature below the one where its share falls to 10 %
    t_from, t_to, peak, _ = receipt.rival_temperatures(z, 0)
    assert t_from == 0.0 and peak == 1.0 and softmax(z / t_to)[0] == pytest.approx(0.1, rel=1e-9)
    # never: a rival far below a large crowd
    assert receipt.rival_temperatures(np.array([5.0, 0.0] + [0.1] * 500), 1)[:2] == (None, None)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_temperature_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 3, 2_000)
    z[:2] = z.max() + np.array([2.0, 1.2])  # a clear top and a runner-up
    r = receipt.rival_of(z, 0)
    assert r == 1
    t_from, t_to, peak, _ = receipt.rival_temperatures(z, r)
    grid = np.geomspace(0.01, 1000, 20_001)
    shares = np.array([softmax(z / t)[r] for t in grid])
    above = shares > receipt.SHARE
    inside = (grid > t_from) & (grid < t_to) if t_from is not None else np.zeros_like(above)
    near = np.zeros_like(above) if t_from is None else (np.abs(grid / t_from - 1) < 1e-6) | (np.abs(grid / t_to - 1) < 1e-6)
    assert np.array_equal(above[~near], inside[~near])
    assert peak >= shares.max() - 1e-12


# ---------------------------------------------------------------------------------------------
# confirmations and components against hand-written hooks


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


@pytest.mark.parametrize("arch", ARCHS)
def test_lens_attribution_and_p_are_the_instruments_own(tiny_loaded, arch):
    loaded = tiny_loaded[arch]
    tr = backends.trace(loaded, "One two three four five six")
    pos = 3  # a position inside the prompt: its prefix 0 … 3 is what attribution and patching read
    rc = _make(loaded, tr, pos)
    ids, probs = lens.logit_lens(loaded, tr, lo=pos, hi=pos + 1)
    floats.assert_same(rc.formed.top_ids[:, 0], ids[:, 0], "lens top-1")
    floats.assert_same(rc.formed.top_probs[:, 0], probs[:, 0], "lens top-1 probability")
    at_top = rc.formed.top_ids[:, 0] == rc.token_id
    floats.assert_same(rc.formed.curve[at_top], rc.formed.top_probs[at_top, 0].astype(np.float64), "curve where it leads")
    assert rc.formed.top1 == (int(np.argmax(at_top)) if at_top.any() else None)
    logits = backends.logits_row(loaded, tr, pos)
    assert rc.p == softmax(logits)[rc.token_id] and rc.token_id == int(np.argmax(logits)) and rc.chosen
    g = attribution.grad_x_input(loaded, tr.token_ids[: pos + 1].tolist(), rc.token_id, rc.rival.id)
    floats.assert_same(rc.read.scores, g.scores, "gradient × input")
    assert rc.read.value == g.value
    assert rc.rival.id == receipt.rival_of(logits, rc.token_id)
    # a token the model scored but did not choose: its rival is the model's own choice
    other = int(np.argsort(logits)[-3])
    rc2 = _make(loaded, tr, pos, other)
    assert not rc2.chosen and rc2.rival.id == int(np.argmax(logits)) and rc2.rival.margin < 0


def test_a_prefix_past_the_budget_says_what_was_bounded(tiny_loaded):
    loaded = tiny_loaded["llama"]
    tr = backends.trace(loaded, " ".join(["word"] * (receipt.BUDGET_TOKENS + 10)))
    assert tr.n_tokens > receipt.BUDGET_TOKENS
    rc = _make(loaded, tr)
    assert rc.read is None and rc.carried is None and rc.forward_passes == 0
    keys = [p.key for p in receipt.lines(rc)["unmeasured"]]
    assert "receipt.bounded" in keys
    text = receipt.card_markdown(rc, "en")
    assert f"{tr.n_tokens:,} tokens" in text and str(receipt.BUDGET_TOKENS) in text
    assert rc.formed is not None  # the lens and the rival are still measured
    # a position inside the budget on the same prompt gets everything
    assert _make(loaded, tr, receipt.BUDGET_TOKENS - 1).read is not None


def test_a_model_patching_refuses_gets_a_sentence_saying_which_part():
    torch.manual_seed(0)
    post = wrap(ToyTransformer(ToyConfig(norm_placement="post", n_layers=2)), "test")
    tr = backends.trace(post, "abcabc")
    rc = receipt.make(post, tr.token_ids.tolist(), tr.n_tokens - 1, tr.last_logits, None,
                      lambda layer: backends.attention(post, tr, layer))
    keys = [p.key for p in rc.unavailable]
    assert "receipt.no_lens" in keys and "receipt.unavailable_cause" in keys
    for lang in ("en", "zh"):
        md = receipt.card_markdown(rc, lang)
        assert "⟦" not in md and "pre-norm" in rc.unavailable[-1].text("en")


def test_the_trained_toy_gets_a_whole_receipt():
    toy = load_trained()
    tr = backends.trace(toy, "kqzmwpkqzmw")
    rc = _make(toy, tr)
    assert not rc.unavailable and rc.formed is not None and rc.read is not None and rc.carried
    assert rc.n_components == toy.facts.n_layers * (toy.facts.n_heads + 1)
    for lang in ("en", "zh"):
        assert "⟦" not in receipt.card_markdown(rc, lang)
