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


# pasted configs: (case, field, raw JSON value or None for a whole text, expected code)
KV_BASE = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
DEEP = '{"rope_scaling": ' + "[" * 100_000 + "]" * 100_000 + "}"  # RecursionError inside json
DEEPISH = '{"quantization_config": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}"  # parses, but 40 levels deep

CASES: list[tuple[str, str, str | None, str]] = [
    ("deep nesting (json recursion)", "", DEEP, "too_deep"),
    ("deep nesting (40 levels)", "", DEEPISH, "too_deep"),
    ("rope_parameters a list", "rope_parameters", "[10000, 1]", "not_dict"),
    ("rope_theta text", "rope_theta", '"abc"', "not_number"),
    ("rope_theta negative", "rope_theta", "-1", "not_positive"),
    ("rope_theta Infinity", "rope_theta", "Infinity", "not_finite"),
    ("rope_scaling a string", "rope_scaling", '"linear"', "not_dict"),
    ("rope type not text", "rope_scaling", '{"rope_type": 3}', "not_text"),
    ("hidden_size Infinity", "hidden_size", "Infinity", "not_finite"),
    ("hidden_size NaN", "hidden_size", "NaN", "not_finite"),
    ("hidden_size 1e400", "hidden_size", "1e400", "not_finite"),
    ("hidden_size 1e24", "hidden_size", "1e24", "too_big"),
    ("num_hidden_layers 10**7", "num_hidden_layers", "10000000", "too_big"),
    ("num_key_value_heads 10**30", "num_key_value_heads", "1" + "0" * 30, "too_big"),
    ("max_position_embeddings Infinity", "max_position_embeddings", "Infinity", "not_finite"),
    ("max_position_embeddings -5", "max_position_embeddings", "-5", "not_positive"),
    ("sliding_window Infinity", "sliding_window", "Infinity", "not_finite"),
    ("sliding_window negative", "sliding_window", "-4096", "not_positive"),
    ("0 heads", "num_attention_heads", "0", "not_positive"),
    ("0 KV heads", "num_key_value_heads", "0", "not_positive"),
    ("layers as text", "num_hidden_layers", '"abc"', "not_integer"),
    ("layers as a numeric string", "num_hidden_layers", '"32"', "not_integer"),
    ("layers 32.7", "num_hidden_layers", "32.7", "not_integer"),
    ("layers true", "num_hidden_layers", "true", "not_integer"),
    ("heads not a multiple of KV heads", "num_key_value_heads", "5", "not_multiple"),
    ("projection wider than any model", "head_dim", "9000000", "too_big"),
    ("weights beyond any machine", "hidden_size", "10000000", "too_big"),
    ("architectures: 5", "architectures", "5", "not_list"),
    ("model_type a list", "model_type", '["llama"]', "not_text"),
    ("hidden_act a number", "hidden_act", "7", "not_text"),
    ("tie_word_embeddings text", "tie_word_embeddings", '"yes"', "not_bool"),
    ("text_config a string", "text_config", '"x"', "not_dict"),
    ("an integer of 5000 digits", "vocab_size", "9" * 5000, "json"),
    ("not an object", "", "[1, 2, 3]", "not_object"),
    ("not JSON", "", "{oops", "json"),
]
