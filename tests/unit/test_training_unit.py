"""Training vs inference (core.learn.training, pages/training.py): labels shifted by one, every position's
loss from one parallel pass, and the same logits from a separate pass of each prefix.

References: Hugging Face's own training loss (``model(input_ids, labels=input_ids).loss``, which shifts the
labels itself) and HF's own eager model in float32 and float64 (conftest.EagerReference) for the bounds.
"""

from __future__ import annotations

import floats
import numpy as np
import torch

from core import backends
from core.learn import training


def test_cross_entropy_by_hand():
    rng = np.random.default_rng(0)
    z = rng.normal(0, 5, size=(6, 50))
    lab = rng.integers(0, 50, size=6)
    ours = training.cross_entropy(z, lab)
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(z), torch.from_numpy(lab), reduction="none").numpy()  # float64
    # two float64 routes of log Σ exp (V terms) minus one logit: each within γ_{V+2}·(|lse| + max|z|) of the exact value
    bound = floats.sum_bound(np.abs(z).max() + np.abs(ref) + np.log(z.shape[1]), z.shape[1] + 2, floats.U64)
    floats.assert_within(ours, ref, bound, "cross-entropy vs torch (float64)")
    assert np.all(ours > 0)


def test_toy_model_works_too():
    toy = backends.load_model("toy")
    tr = backends.trace(toy, "the cat sat on the mat")
    tf = training.teacher_forcing(toy, tr)
    logits = torch.from_numpy(backends.full_logits(toy, tr)[:-1]).double()
    ref = torch.nn.functional.cross_entropy(logits, torch.from_numpy(tr.token_ids[1:].astype(np.int64)), reduction="none").numpy()
    floats.assert_within(tf.losses, ref, floats.sum_bound(np.abs(ref) + np.abs(logits.numpy()).max(), logits.shape[1] + 2, floats.U64),
                         "toy per-position loss")
    sl = training.same_logits(toy, tr, 2)
    assert sl.same_top
