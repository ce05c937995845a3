"""One chunked per-position loss (core.backends.next_token_logprob), shared by the long-context page's loss
along the document and the training page's per-position loss, rank and favourite.

References: Hugging Face's own training loss (``model(ids, labels=ids).loss``, which shifts the labels
itself) and HF's eager model in float64 for the bound (conftest.EagerReference); for the rank and the
favourite, the LM head applied by hand to the same rows (the same route → exact equality).
"""

from __future__ import annotations

import floats
import numpy as np
import pytest
import torch

from core import backends
from core.engine import roles

PROMPT = "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"


def _hf_losses(ref, ids):
    """(per-position float64 losses of the float64 model, HF's float32 labels= loss, the exact mean)."""
    x = torch.tensor([ids])
    out32, out64 = ref.run(ids, labels=x), ref.run(ids, "float64", labels=x)
    z64 = out64.logits[0, :-1].double()
    per64 = -torch.log_softmax(z64, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
    return float(out32.loss), float(per64.mean())


@pytest.mark.parametrize("name", ["llama", "gpt2", "smollm2"])
def test_minus_mean_is_hfs_own_loss(name, smol, tiny_loaded, eager_refs):
    """−mean log p(next) is HF's ``labels=`` loss: as close to the exact (float64 model) loss as HF's own float32
    loss is, on a tiny random model, a GPT-2-shaped one and the embedded SmolLM2; in chunks that cut the text."""
    loaded = smol if name == "smollm2" else tiny_loaded[name]
    tr = backends.trace(loaded, PROMPT)
    ids = tr.token_ids.tolist()
    got = backends.next_token_logprob(loaded, tr, chunk=7)
    assert got.logp.shape == (len(ids) - 1,) and got.logp.dtype == np.float64 and got.rank is None and got.top1 is None
    assert np.all(got.logp < 0)
    hf32, exact = _hf_losses(eager_refs[name], ids)
    floats.assert_as_accurate(-got.logp.mean(), hf32, exact, f"{name}: −mean log p vs HF's labels= loss")


@pytest.mark.parametrize("chunk", [5, 1000])
def test_rank_and_favourite_equal_the_full_rows(smol, chunk):
    """The rank of the real token and the favourite equal those read off the LM head's logits of the same rows,
    computed here by hand (the same route on the same chunk → equal, not close); log p is the float64
    log-softmax of those float32 rows (two float64 routes of one log-sum-exp: γ_{V+2} of what is summed)."""
    tr = backends.trace(smol, PROMPT)
    got = backends.next_token_logprob(smol, tr, chunk=chunk, ranks=True)
    n = tr.n_tokens - 1
    labels = tr.token_ids[1:].astype(np.int64)
    head = roles.find_sites(smol.model).lm_head
    rows = []
    with torch.inference_mode():
        for a in range(0, n, chunk):
            rows.append(head(torch.from_numpy(np.array(tr.final_hidden[a : min(a + chunk, n)]))).float().numpy())
    z = np.concatenate(rows)  # [n, V] float32: the full rows, for the reference only
    label_logit = z[np.arange(n), labels]
    assert got.rank.tolist() == (z > label_logit[:, None]).sum(axis=1).tolist()
    assert got.top1.tolist() == z.argmax(axis=1).tolist()
    assert np.all((got.rank == 0) == (got.top1 == labels))
    z64 = z.astype(np.float64)
    m = z64.max(axis=1)
    ref = label_logit - (m + np.log(np.exp(z64 - m[:, None]).sum(axis=1)))
    bound = floats.sum_bound(np.abs(z64).max(axis=1) + np.abs(ref) + np.log(z.shape[1]), z.shape[1] + 2, floats.U64)
    floats.assert_within(got.logp, ref, bound, what="log p from the same rows", why="two float64 routes of a log-sum-exp")


def test_one_token_has_no_label(smol):
    tr = backends.trace(smol, "Hi")
    one = backends.trace_ids(smol, tr.token_ids[:1].tolist())
    with pytest.raises(ValueError):
        backends.next_token_logprob(smol, one)
