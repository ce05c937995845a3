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
from helpers.inputs import CASES, KV_BASE, _refusal, _text

from core.common import i18n
from core.engine import config as cfgread
from core.engine.types import ConfigError
from core.gen import kvcalc
from core.stream import anatomy
from core.web.widgets import code, md

# ---------------------------------------------------------------------------------------------
# pasted configs (the cases: helpers.inputs.CASES)

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
