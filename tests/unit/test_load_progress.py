"""The model's loading bar says what it does, in the page's language, with how far it is (issue 28)."""

from __future__ import annotations

import re

import pytest
import transformers.modeling_gguf_pytorch_utils as gguf_utils

from core.engine import hf
from core.engine.types import Phrase
from core.web import bar

STEPS = ["load.start", "load.step_check", "load.step_read", "load.step_dequant", "load.step_write",
         "load.step_load_first", "load.step_load", "load.step_weights", "load.ready"]
FIELDS = {"done": 3, "n": 272}
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.parametrize("key", STEPS)
def test_every_step_is_said_in_both_languages(key):
    en, zh = Phrase(key, FIELDS).text("en"), Phrase(key, FIELDS).text("zh")
    assert en and not CJK.search(en) and "{" not in en
    assert CJK.search(zh) and "{" not in zh and not re.search(r"[(),:;]", zh)  # full-width punctuation


def test_the_bar_says_how_far_and_what_in_the_readers_language():
    said = Phrase("load.step_dequant", FIELDS)
    assert bar.text(42, 100, said, "en", share_first=True) == (
        "42% · First start: converting the embedded model, once. Step 2 of 4: de-quantising its weights (3 of 272 tensors) …")
    assert bar.text(42, 100, said, "zh", share_first=True) == (
        "42% · 首次启动：正在转换内置模型（只需一次）。第 2 步（共 4 步）：反量化权重（已完成 3/272 个张量）……")
    assert bar.text(170, 100, "ready", "zh", share_first=True) == "100% · ready"  # a plain message as it is, the share capped


def test_the_de_quantisation_counts_the_tensors():
    got: list[tuple[int, Phrase]] = []
    totals: set[int] = set()
    loop = hf._counted(lambda done, total, m: got.append((done, m)) or totals.add(total))
    assert list(loop(range(100), desc="…")) == list(range(100))  # every tensor, in order
    assert totals == {hf.LOAD_TOTAL}  # counted in per cent of the whole load
    fracs = [f for f, _ in got]
    assert fracs == sorted(fracs) and hf.DEQUANT_SPAN[0] <= fracs[0] and fracs[-1] == hf.DEQUANT_SPAN[1]
    assert all(m.key == "load.step_dequant" for _, m in got) and got[-1][1].params == {"done": 100, "n": 100}
    assert 15 <= len(got) <= 25  # every 5 %: a bar that moves, not a message per tensor


def test_the_conversion_says_each_step_through_transformers_own_loop(monkeypatch, tmp_path):
    """transformers wraps the GGUF's tensors in its module's ``tqdm``: the conversion counts through it, and
    puts it back."""
    assert callable(getattr(gguf_utils, "tqdm", None))
    own = gguf_utils.tqdm
    said: list[str] = []

    class Stop(Exception):
        pass

    def fake_model(*_a, **_k):
        for _ in gguf_utils.tqdm(range(40), desc="Converting and de-quantizing GGUF tensors..."):
            pass
        raise Stop

    monkeypatch.setattr(hf.AutoTokenizer, "from_pretrained", lambda *a, **k: None)
    monkeypatch.setattr(hf.AutoModelForCausalLM, "from_pretrained", fake_model)
    with pytest.raises(Stop):
        hf._dequantise(tmp_path / "x.gguf", tmp_path, lambda _done, _total, m: said.append(m.key))
    assert gguf_utils.tqdm is own
    assert said[0] == "load.step_read" and said[1:] == ["load.step_dequant"] * (len(said) - 1) and len(said) > 10
