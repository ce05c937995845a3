"""Helpers shared by the tiers of test_any_model's tests (tests/*/test_any_model*.py)."""

from __future__ import annotations

N_POS = 64  # the tiny GPT-2's positions: far under the app's 4,096
