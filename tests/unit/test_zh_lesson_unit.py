"""The Chinese lesson (issue 25): a Chinese UI starts on a Chinese example, the stepper shows the bytes
still waiting instead of U+FFFD, the Chinese cause-and-effect pair fits SmolLM2's tokenizer, the zh
strings render their bold (CJK flanking), and the zh pages have no English left where the issue found it."""

from __future__ import annotations

import json
import re

import numpy as np
from markdown_it import MarkdownIt

from conftest import ROOT, _smol_tokenizer
from core.engine import tokens


def test_stepper_text_shows_pending_bytes_not_fffd():
    tok = _smol_tokenizer()
    ids = tok("成都今天适合跑步吗", add_special_tokens=False)["input_ids"]
    assert "\ufffd" not in tokens.decoded_text(tok, ids)
    assert tokens.decoded_text(tok, ids) == "成都今天适合跑步吗"
    cut = None
    for n in range(1, len(ids)):  # a prefix that stops inside a character
        if tok.decode(ids[:n]).endswith("\ufffd"):
            cut = n
            break
    assert cut is not None, "the example no longer splits a character into byte tokens"
    shown = tokens.decoded_text(tok, ids[:cut])
    assert "\ufffd" not in shown
    head = tok.decode(ids[: cut - 1]) if not tok.decode(ids[: cut - 1]).endswith("\ufffd") else tok.decode(ids[: cut - 2])
    m = re.fullmatch(r"(.*)‹([0-9A-F]{2}(?: [0-9A-F]{2})*)›", shown)
    assert m is not None and m.group(1) == head
    waiting = bytes.fromhex(m.group(2))
    whole = "成都今天适合跑步吗".encode()
    assert whole.startswith(head.encode() + waiting) and len(waiting) < 3  # the first bytes of the next character


def test_decoded_text_is_decode_when_whole():
    tok = _smol_tokenizer()
    for text in ("The capital of France is", "苹果很好吃。", "🙂 emoji"):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tokens.decoded_text(tok, ids) == tok.decode(ids)


def _strings():
    for f in sorted((ROOT / "assets" / "i18n").glob("*.json")):
        for key, v in json.loads(f.read_text(encoding="utf-8")).items():
            if isinstance(v, dict):
                for lang in ("en", "zh"):
                    if isinstance(v.get(lang), str):
                        yield key, lang, v[lang]


def test_bold_renders_in_every_string():
    """CommonMark's flanking rule: "**定位：**与" stays raw (a closing ** after punctuation needs a space
    or punctuation after it). Streamlit's renderer follows CommonMark, so a string with ** that
    markdown-it leaves as ** shows raw asterisks on the page."""
    md = MarkdownIt("commonmark")
    raw = [(k, lang) for k, lang, s in _strings() if "**" in s and "**" in md.render(re.sub(r"\{[^{}]*\}", "X", s))]
    assert raw == []


def test_three_attention_implementations_agree_within_float32():
    """Seed 000's misconception 10: SDPA, eager and a tiled online softmax (FlashAttention's idea) give the
    exact (float64) answer as accurately as float32's own eager route does (floats.assert_as_accurate)."""
    import floats

    from core.maths import attention as A

    for n, block in ((512, 64), (200, 48)):  # a last block shorter than the others too
        c = A.compare_implementations(n=n, block=block)
        out, exact = c["outputs"], c["exact"]
        for name in A.IMPLEMENTATIONS:
            floats.assert_as_accurate(out[name], out["eager"], exact, f"{name} attention, n={n}")
            assert c["max_err"][name] == float(np.abs(out[name].astype(np.float64) - exact).max())
        assert not np.array_equal(out["tiled"], out["eager"])  # a different route, not the same sums


def test_degenerate_fit_says_so_first_and_prints_no_split():
    """issue 25: a busy machine's fit set the linear part to zero and the page said 'the quadratic
    (attention) part is 100 %'. A degenerate fit is said first, and no split (no parts, no share) is shown."""
    from helpers.diagnose import _curve

    from core.common import i18n
    from core.gen import diagnose as dg
    from core.gen import report

    pts = _curve([128, 256, 512, 1024, 2048], a=0.05, b=0.0, c=2.7e-7)  # no per-token part: the fit can only put b = 0
    fit = dg.fit_points(pts)
    assert fit.b == 0 and fit.c > 0 and fit.degenerate
    assert not dg.fit_points(_curve([64, 256, 1024])).degenerate
    ex = dg.exercise(pts, 8192)
    for lang in ("en", "zh"):
        caveat = i18n.t("diagnose.zero_part", lang, part=i18n.t("diagnose.part_linear", lang))
        text = report.exercise_prefill_text(ex, lang)
        assert text.startswith(caveat) and f"{ex.quadratic_share:.0f} %" not in text, text
        fit_text = report.prefill_fit_text(pts, fit, lang)
        assert fit_text.startswith(caveat)
        assert f"**{i18n.t('diagnose.part_linear', lang)}" not in fit_text  # fit_text's "**linear part 0 ms**": no split
        assert f"**{i18n.t('diagnose.part_linear', lang)}" in report.prefill_fit_text(_curve([64, 256, 1024]), dg.fit_points(_curve([64, 256, 1024])), lang)
