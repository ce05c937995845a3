"""Helpers shared by the receipt's tests (tests/*/test_receipt*.py): a receipt made as the panel makes it."""

from __future__ import annotations

from core import backends
from core.cause import receipt
from core.stream import lens


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
