"""The concepts the house writes once, each checked against an independent reference: torch for
the numerics, the model's own forward pass and KV cache for the backends, hand computations for
the formulas, and both kinds of model (HF and the toy) for everything that serves both."""

from __future__ import annotations

import threading

import floats
import numpy as np
import pytest
import torch

from core import backends
from core.common import numbers
from core.engine import tokens
from core.engine.hooks import scoped_hooks
from core.stream import anatomy
from core.web import chips

# ---------------------------------------------------------------------------------------------
# the one label rule


def test_visible_label_rule():
    assert tokens.visible(" a\tb\n") == "␣a⇥b⏎"
    assert tokens.visible("\x00\x7f") == "␀␡"
    assert tokens.visible("") == "∅"
    assert tokens.visible("⟨E8 8B⟩") == "‹E8 8B›"  # a byte label keeps its own space (drawn ‹›: ⟨⟩ reads as "()")
    assert tokens.position_label(["x", " y"], 1) == "1·␣y" and tokens.position_label(["x", " y"], 1, offset=10) == "11·␣y"


def test_chips_escape_colour_and_frame():
    h = chips.chips_html(["<b>", " x"], [1, 2], kinds=["special", "user"], framed_tail=1, positions=True)
    assert "&lt;b&gt;" in h and "<b>" not in h and 'data-piece="␣x"' in h
    assert h.count("dashed") == 1 and h.count("outline:2px") == 1 and "<sub>1</sub>" in h


# ---------------------------------------------------------------------------------------------
# numerics, against torch


def _softmax_error64(x: np.ndarray) -> np.ndarray:
    """How far one float64 softmax of the rows of ``x`` can lie from the exact one, per weight, relative:
    the subtraction of the row's maximum (r: the row's spread) in the exponent and exp (≤ 2 ulps), in the
    numerator and in the denominator, then the n-term sum and the division (γ_{n+1})."""
    spread = x.max(-1, keepdims=True) - x.min(-1, keepdims=True)
    return 2 * floats.U64 * (spread + 4) + floats.gamma(x.shape[-1] + 1, floats.U64)


def test_softmax_top_k_entropy_against_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 50)) * 4
    for xs, temperature in ((x, 1.0), (x[0], 0.5)):  # ÷ 0.5 is exact: the same scores for both
        ours, ref = numbers.softmax(xs, temperature=temperature), torch.softmax(torch.tensor(xs) / temperature, -1).numpy()
        floats.assert_within(ours, ref, 2 * _softmax_error64(xs / temperature) * ref, "softmax", "two float64 routes of one softmax")
    assert numbers.softmax(np.array([-np.inf, -np.inf])).tolist() == [0.0, 0.0]  # nothing visible → nothing read
    assert numbers.top_k(x[0], 5).tolist() == torch.topk(torch.tensor(x[0]), 5).indices.tolist()
    assert numbers.top_k(x[0], 0).size == 0 and numbers.top_k(x[0], 99).size == 50
    # ties (and -inf, NaN): exactly the stable sort's order, the lower index first, in 1-D and row by row
    ties = rng.integers(0, 4, (40, 30)).astype(np.float64)
    ties[::7, 3], ties[::5, 11] = -np.inf, np.nan
    for k in (0, 1, 2, 5, 29, 30, 31):
        assert all(numbers.top_k(r, k).tolist() == np.argsort(-r, kind="stable")[:k].tolist() for r in ties)
        assert numbers.top_k(ties, k).tolist() == np.argsort(-ties, axis=-1, kind="stable")[:, :k].tolist()
    # torch's own softmax of a tensor: the same route as torch.softmax in float64, so the same bits
    z = torch.tensor(x, dtype=torch.float32)
    floats.assert_same(numbers.softmax_of_tensor(z), torch.softmax(z.double(), dim=-1).numpy(), "softmax of a tensor")
    p = numbers.softmax(x[1])
    n, plogp = p.size, np.abs(p * np.log(p))
    # H = −Σ p log p by two float64 routes: torch renormalises p first (each p off by ≤ γ_{n+1} relative, which
    # moves p·log p by ≤ γ_{n+1}·p(|log p| + 1)); each route's logs, products and n-term sum: γ_{n+3}·Σ|p log p|
    bound = (floats.gamma(n + 1, floats.U64) * (plogp + p).sum() + 2 * floats.gamma(n + 3, floats.U64) * plogp.sum()) / np.log(2)
    floats.assert_within(numbers.entropy_bits(p), float(torch.distributions.Categorical(probs=torch.tensor(p)).entropy()) / np.log(2),
                         bound, "entropy", "two float64 routes of an n-term sum of p·log p")
    assert numbers.human_bytes(1536) == "1.5 KiB" and numbers.human_bytes(512) == "512 B"


def test_known_published_count():
    assert anatomy.published_count(anatomy.analyse_config(anatomy.QWEN25_05B_CONFIG)) == anatomy.QWEN25_05B_PARAMS
    other = dict(anatomy.QWEN25_05B_CONFIG, num_hidden_layers=12)
    assert anatomy.published_count(anatomy.analyse_config(other)) is None


def test_scoped_hooks_are_thread_local_and_always_removed(toy):
    seen = []
    m = toy.model.layers[0].mlp
    with scoped_hooks([(m, "forward", lambda *_: seen.append(threading.get_ident()))]):
        other = threading.Thread(target=lambda: backends.forward_step(toy, [1, 2, 3], use_cache=False))
        other.start()
        other.join()
        backends.forward_step(toy, [1, 2, 3], use_cache=False)
    assert seen == [threading.get_ident()]  # the other thread's pass was not seen
    with pytest.raises(RuntimeError), scoped_hooks([(m, "forward", lambda *_: None)]):
        raise RuntimeError("boom")
    assert not m._forward_hooks
