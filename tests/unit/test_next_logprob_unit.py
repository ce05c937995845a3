"""One chunked per-position loss (core.backends.next_token_logprob), shared by the long-context page's loss
along the document and the training page's per-position loss, rank and favourite.

References: Hugging Face's own training loss (``model(ids, labels=ids).loss``, which shifts the labels
itself) and HF's eager model in float64 for the bound (conftest.EagerReference); for the rank and the
favourite, the LM head applied by hand to the same rows (the same route → exact equality).
"""

from __future__ import annotations

import floats
import numpy as np
import torch

from core import backends


def test_toy_model_too():
    """The toy's head (its own ``lm_head``) on its final hidden states: the same rows as ``full_logits``."""
    toy = backends.load_model("toy")
    tr = backends.trace(toy, "the cat sat on the mat")
    got = backends.next_token_logprob(toy, tr, ranks=True)
    z = backends.full_logits(toy, tr)[:-1]  # T < one chunk: the same product on the same rows
    labels = tr.token_ids[1:].astype(np.int64)
    assert got.top1.tolist() == z.argmax(axis=1).tolist()
    assert got.rank.tolist() == (z > z[np.arange(len(labels)), labels][:, None]).sum(axis=1).tolist()
    ref = torch.log_softmax(torch.from_numpy(z).double(), -1)[torch.arange(len(labels)), torch.from_numpy(labels)].numpy()
    bound = floats.sum_bound(np.abs(z).max() + np.abs(ref), z.shape[1] + 2, floats.U64)
    floats.assert_within(got.logp, ref, bound, what="toy log p", why="two float64 routes of a log-sum-exp")
