"""Helpers shared by the tiers of test_ops_hardening's tests (tests/*/test_ops_hardening*.py)."""

from __future__ import annotations


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]
