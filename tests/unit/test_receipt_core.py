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
from helpers.receipt import _make

from core import backends
from core.cause import attribution, receipt
from core.common.numbers import softmax
from core.stream import lens
from core.toy import load_trained
from core.toy.model import ToyConfig, ToyTransformer
from core.toy.run import wrap

ARCHS = ("llama", "qwen2", "mistral", "gpt2")




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
