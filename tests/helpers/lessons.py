"""Helpers shared by the tiers of test_lessons's tests (tests/*/test_lessons*.py)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

# ---------------------------------------------------------------------------------------------
# the routes


def _split(link: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(link)
    return parts.path, dict(parse_qsl(parts.query, keep_blank_values=True))
