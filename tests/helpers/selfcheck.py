"""Helpers shared by the tiers of test_selfcheck's tests (tests/*/test_selfcheck*.py)."""

from __future__ import annotations

import re


def _numbers(text: str) -> set[int]:
    """Whole numbers written in ``text`` ("2,000" → 2000)."""
    return {int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)}
