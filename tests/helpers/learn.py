"""Helpers shared by the tiers of test_learn's tests (tests/*/test_learn*.py)."""

from __future__ import annotations

from core.engine import tokens


def _decode(loaded):
    return lambda ids: tokens.readable_tokens(loaded.tokenizer, ids)
