"""Helpers shared by the tiers of test_long_prefill's tests (tests/*/test_long_prefill*.py)."""

from __future__ import annotations

import torch

from core import backends


def _same_cache(a, b) -> None:
    for (k1, v1), (k2, v2) in zip(backends.cache_layers(a), backends.cache_layers(b), strict=True):
        assert torch.equal(k1, k2) and torch.equal(v1, v2)
