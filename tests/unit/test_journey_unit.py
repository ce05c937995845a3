"""The journey page's numbers against independent references."""

from __future__ import annotations

import inspect

from helpers.journey import _check_sources

from core import backends
from core.learn import journey
from core.web import chips


def test_chips_escape_text_and_mark_specials():
    html = chips.chips_html(["<b>x</b>", " a\n"], [5, 6], kinds=chips.kinds_from_special([True, False]))
    assert "<b>x" not in html and "&lt;b&gt;" in html and "␣a⏎" in html
    assert html.count("dashed") == 1


def test_stage_sources_follow_the_model_qwen2_and_the_toy(tiny_loaded):
    qwen = tiny_loaded["qwen2"]
    src = journey.stage_sources(qwen)
    _check_sources(src, model_file=inspect.getsourcefile(type(qwen.model.model.layers[0])))
    assert any(s.path.endswith("models/qwen2/modeling_qwen2.py") and s.name == "Qwen2Attention.forward" for s in src[5])
    toy = backends.load_model("toy")
    src = journey.stage_sources(toy)
    _check_sources(src)
    assert {s.path for s in src[5]} == {"core/toy/model.py"}
    assert {"Block.forward", "Attention.forward", "MLP.forward"} <= {s.name for s in src[5]}
