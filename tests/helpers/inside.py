"""Helpers shared by the tiers of test_inside's tests (tests/*/test_inside*.py)."""

from __future__ import annotations

import torch

# ---------------------------------------------------------------------------------------------
# ablation


def _plain_probs(model, ids):
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits
    return torch.softmax(logits[0, -1].double(), dim=-1).numpy()


def _no_hooks(model) -> bool:
    return all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
