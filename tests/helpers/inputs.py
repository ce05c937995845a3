"""Helpers shared by the tiers of test_inputs's tests (tests/*/test_inputs*.py)."""

from __future__ import annotations

import json

import pytest

from core.engine.types import ConfigError


def _text(base: dict, field: str, raw: str | None) -> str:
    """``base`` as JSON text with ``field`` set to the raw JSON ``raw`` (or ``raw`` alone when no field)."""
    if not field:
        return raw or ""
    rest = {k: v for k, v in base.items() if k != field}
    return json.dumps(rest)[:-1] + f', "{field}": {raw}}}'


def _refusal(fn, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        fn(text)
    return info.value
