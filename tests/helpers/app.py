"""Helpers shared by the tiers of test_app's tests (tests/*/test_app*.py)."""

from __future__ import annotations


def _font_sizes(obj, out: list[float], inside_font: bool = False) -> list[float]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "size" and inside_font and isinstance(v, (int, float)):
                out.append(v)
            _font_sizes(v, out, inside_font or "font" in k)
    elif isinstance(obj, list):
        for v in obj:
            _font_sizes(v, out, inside_font)
    return out
