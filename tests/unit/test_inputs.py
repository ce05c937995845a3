"""Ordinary inputs never crash a page (issue 15, section 3).

* A pasted config.json is validated once, by ``core.engine.config``: every impossible input is a
  ``ConfigError`` with a code, refused alike by the reader, the anatomy page's analysis and the KV
  calculator, and shown on both pages as a sentence in the user's language (no traceback).
* A one-token prompt, and a model with one layer and one head, leave every page working: a range of
  one value (one position, one layer, one head, one generation pass) is shown as text, not as a slider
  Streamlit refuses.
* Text the user typed is never rendered as Markdown/HTML (the Tokens page's "PCA words" box).
"""

from __future__ import annotations

import json

import pytest
from helpers.inputs import _refusal, _text

from core.common import i18n
from core.engine import config as cfgread
from core.engine.types import ConfigError
from core.gen import kvcalc
from core.stream import anatomy
from core.web.widgets import code, md

# ---------------------------------------------------------------------------------------------
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
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("case, field, raw, expected", CASES, ids=IDS)
def test_every_reader_refuses_with_a_code(case, field, raw, expected):
    anatomy_text, kv_text = _text(anatomy.QWEN25_05B_CONFIG, field, raw), _text(KV_BASE, field, raw)
    assert _refusal(cfgread.parse, anatomy_text).code == expected
    assert _refusal(lambda t: anatomy.analyse_config(anatomy.parse_config(t)), anatomy_text).code == expected
    assert _refusal(kvcalc.from_config, kv_text).code == expected
    if field and expected != "json":  # the same dict, already parsed (the loader's and the memory budget's way in)
        with pytest.raises(ConfigError):
            cfgread.geometry(json.loads(kv_text))


def test_every_code_has_a_sentence_in_both_languages():
    known = i18n.catalogue()
    for c in cfgread.CODES:
        assert f"anatomy.err_{c}" in known, c
    for *_, expected in CASES:
        assert expected in cfgread.CODES


def test_kv_table_holds_numbers_beyond_int64():
    """A legal (if absurd) shape at the calculator's widest settings: more bytes than an int64 counts."""
    g = kvcalc.from_config({"num_hidden_layers": 1000, "num_attention_heads": 100, "hidden_size": 12800})
    rows = kvcalc.variant_rows(g, 10_000_000, 4, 100_000)
    assert all(isinstance(r["total_bytes"], float) for r in rows)
    import pyarrow as pa  # deferred: only this test needs it

    pa.Table.from_pylist(rows)  # what st.dataframe does with them


def test_md_makes_text_inert():
    s = md("<img src=x onerror=alert(1)> ![p](http://h/x.png) **b** :red[x] $x$ &lt;")
    assert "<" not in s and ">" not in s and "![" not in s and "**" not in s and ":red[" not in s and "$x$" not in s
    assert "&amp;lt;" in s  # an entity the user typed stays visible as typed
    assert code("a`b\nc") == "aˋb c"
