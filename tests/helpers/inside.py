"""Helpers shared by the tiers of test_inside's tests (tests/*/test_inside*.py)."""

from __future__ import annotations

import torch
from helpers.cause import _ours

# ---------------------------------------------------------------------------------------------
# ablation


def _plain_probs(model, ids):
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits
    return torch.softmax(logits[0, -1].double(), dim=-1).numpy()


def _no_hooks(model) -> bool:
    """None of ours left on the shared model (transformers' own output-capturing hooks stay once a call with
    ``output_hidden_states`` / ``output_attentions`` installed them: ``helpers.cause._ours``)."""
    return all(not _ours(m._forward_pre_hooks) and not _ours(m._forward_hooks) for m in model.modules())
