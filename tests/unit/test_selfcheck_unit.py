"""Issue 25: the quiz items for the points that had none (fixed head roles, concat and W_O, two residuals and
two norms per block, long input vs long output), each right answer checked against the real model; and the
printable self-check list (every point mapped to registered pages, both languages, a Markdown download)."""

from __future__ import annotations

import pytest
from helpers.selfcheck import _numbers

from core.common import i18n
from core.learn import checklist, quiz
from core.web.nav import STEMS

NEW = ("head_roles", "concat_wo", "two_norms", "long_io")


def test_new_items_are_registered_with_both_languages():
    cat = i18n.catalogue()
    for qid in NEW:
        q = quiz.BY_ID[qid]
        assert q.page in STEMS
        for k in (f"quiz.{qid}.q", f"quiz.{qid}.why", *(f"quiz.{qid}.o{i}" for i in range(q.n_options))):
            assert cat[k]["en"].strip() and cat[k]["zh"].strip(), k
        # the numbers quoted are the same in both languages
        en, zh = (" ".join(cat[f"quiz.{qid}.{p}"][x] for p in ("q", "why", "o0", "o1", "o2")) for x in ("en", "zh"))
        assert _numbers(en) == _numbers(zh), qid


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_checklist_points_map_to_pages_and_download(lang):
    assert len({p.key for p in checklist.POINTS}) == len(checklist.POINTS) >= 12
    for p in checklist.POINTS:
        assert set(p.pages) <= set(STEMS), p
        assert i18n.t(f"checklist.{p.key}", lang) != f"⟦checklist.{p.key}⟧"
    assert {s for p in checklist.POINTS for s in p.pages} >= {"tokens", "heads", "multihead", "residual", "training", "kv_cache"}
    md = checklist.markdown(lambda k: i18n.t(k, lang))
    assert md.startswith(f"# {i18n.t('checklist.h', lang)}\n")
    boxes = [ln for ln in md.splitlines() if ln.startswith("- [ ] ")]
    assert len(boxes) == len(checklist.POINTS)
    assert all(i18n.t(f"page.{p.pages[0]}", lang) in ln for p, ln in zip(checklist.POINTS, boxes))
    if lang == "zh":
        assert all("（页面：" in ln and ln.endswith("）") for ln in boxes)  # full-width punctuation
    with pytest.raises(ValueError):
        checklist.Point("x", ())
