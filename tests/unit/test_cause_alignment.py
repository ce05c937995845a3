"""The pair page's compact alignment: a long pair shows the positions where its prompts differ, with a
little context, and one row for each run of identical positions left out — like a diff.

* the pure ``pair.compact_alignment``: every differing position and its context shown, each position
  either shown once or inside exactly one ``Elided`` marker, in order; short pairs, unequal counts,
  no difference, a difference at either end;
* the page (the embedded model, en and zh): the compact table shows the differing positions at once,
  and "Show every position" brings back the full table.
"""

from __future__ import annotations

from itertools import pairwise

import pytest

from core.cause import pair
from core.common import i18n


def _pt(a: list[int], b: list[int]) -> pair.PairTokens:
    """A pair from token ids alone (each token's text is its id), no tokenizer needed."""
    return pair.PairTokens(tuple(a), tuple(b), tuple(f"t{i}" for i in a), tuple(f"t{i}" for i in b))


def _changed(n: int, at: list[int], m: int | None = None) -> pair.PairTokens:
    """Clean 0 … n − 1; corrupted the same (``m`` tokens long) with the tokens at ``at`` changed."""
    b = list(range(m if m is not None else n))
    for i in at:
        b[i] = 1000 + i
    return _pt(list(range(n)), b)


def _check(pt: pair.PairTokens, context: int = pair.CONTEXT) -> tuple[list[int], list[pair.Elided]]:
    """The invariants of every compact table; returns the positions shown and the markers."""
    full = pair.alignment(pt)
    out = pair.compact_alignment(pt, context=context)
    covered, shown, gaps = [], [], []
    for r in out:
        if isinstance(r, pair.Elided):
            assert r.n >= 2 and r.last == r.stop - 1, r  # a run of one is shown, not elided
            assert all(full[i]["same"] for i in range(r.start, r.stop)), "only identical positions are left out"
            gaps.append(r)
            covered += range(r.start, r.stop)
        else:
            assert r == full[r["pos"]]  # the same row the full table has
            shown.append(r["pos"])
            covered.append(r["pos"])
    # every position exactly once (shown or inside one marker), in order; the markers hide exactly the rest
    assert covered == list(range(len(full)))
    assert sum(g.n for g in gaps) == len(full) - len(shown)
    assert sorted(set(range(len(full))) - set(shown)) == [i for g in gaps for i in range(g.start, g.stop)]
    # no two markers side by side: a marker is always between shown rows (or at an end)
    assert all(not (isinstance(a, pair.Elided) and isinstance(b, pair.Elided)) for a, b in pairwise(out))
    # the last position (where the next token is read), every differing position and its context are shown
    assert len(full) - 1 in shown
    for d in pt.differing():
        assert set(range(max(0, d - context), min(len(full), d + context + 1))) <= set(shown), d
    return shown, gaps


def test_long_pair_shows_the_difference_and_its_context():
    pt = _changed(60, [49, 50, 51])
    shown, gaps = _check(pt)
    assert shown == [*range(47, 54), 59]
    assert [(g.start, g.last, g.n) for g in gaps] == [(0, 46, 47), (54, 58, 5)]  # 8 rows and 2 markers instead of 60 rows


def test_two_differences_far_apart_and_near_each_other():
    shown, gaps = _check(_changed(40, [10, 30]))
    assert shown == [8, 9, 10, 11, 12, 28, 29, 30, 31, 32, 39] and [(g.start, g.stop) for g in gaps] == [(0, 8), (13, 28), (33, 39)]
    # two differences 5 apart: their contexts meet; 6 apart: they leave one position between, shown, not elided
    shown, gaps = _check(_changed(40, [10, 15]))
    assert shown == [*range(8, 18), 39] and [(g.start, g.stop) for g in gaps] == [(0, 8), (18, 39)]
    shown, gaps = _check(_changed(40, [10, 16]))
    assert shown == [*range(8, 19), 39] and [(g.start, g.stop) for g in gaps] == [(0, 8), (19, 39)]


@pytest.mark.parametrize("context", [0, 1, 2, 5])
def test_context_is_a_parameter(context):
    shown, _ = _check(_changed(50, [25]), context=context)
    assert shown == [*range(25 - context, 26 + context), 49]


def test_short_pair_shows_every_row():
    for n in (1, 5, pair.MAX_FULL_ROWS):
        pt = _changed(n, [n // 2])
        assert pair.compact_alignment(pt) == pair.alignment(pt)
    pt = _changed(pair.MAX_FULL_ROWS + 1, [0])
    assert any(isinstance(r, pair.Elided) for r in pair.compact_alignment(pt)), "one row more than fits: compact"


def test_difference_at_the_first_and_the_last_position():
    shown, gaps = _check(_changed(30, [0]))
    assert shown == [0, 1, 2, 29] and [(g.start, g.stop) for g in gaps] == [(3, 29)]
    shown, gaps = _check(_changed(30, [29]))
    assert shown == [27, 28, 29] and [(g.start, g.stop) for g in gaps] == [(0, 27)]
    shown, gaps = _check(_changed(30, [0, 29]))
    assert shown == [0, 1, 2, 27, 28, 29] and [(g.start, g.stop) for g in gaps] == [(3, 27)]


def test_unequal_counts_keep_every_extra_position():
    # corrupted 10 tokens shorter: positions 40 … 49 are past its end, all different, all shown
    pt = _changed(50, [], m=40)
    shown, gaps = _check(pt)
    assert pt.differing() == list(range(40, 50))
    assert shown == list(range(38, 50)) and [(g.start, g.stop) for g in gaps] == [(0, 38)]
    assert all(r["corrupted"] == "" for r in pair.compact_alignment(pt)[-10:])
    # the clean prompt the shorter one, and a changed token as well
    pt = _changed(30, [5], m=36)
    shown, gaps = _check(_pt(list(pt.ids_corrupted), list(pt.ids_clean)))
    assert shown == [3, 4, 5, 6, 7, *range(28, 36)] and [(g.start, g.stop) for g in gaps] == [(0, 3), (8, 28)]
    # a long pair, short prompt: every row past the short end stays
    shown, gaps = _check(_changed(40, [], m=2))
    assert shown == list(range(40)) and not gaps


def test_no_difference_shows_both_ends():
    shown, gaps = _check(_changed(30, []))
    assert shown == [0, 1, 2, 27, 28, 29] and [(g.start, g.stop, g.n) for g in gaps] == [(3, 27, 24)]
    assert pair.compact_alignment(_changed(8, [])) == pair.alignment(_changed(8, []))  # short: every row
    shown, gaps = _check(_changed(30, []), context=0)
    assert shown == [0, 29] and [(g.start, g.stop) for g in gaps] == [(1, 29)]


def test_elided_sentence_in_both_languages():
    assert i18n.t("cause.align_elided", "en", n=47, a=0, b=46) == "… 47 identical positions (0–46) …"
    zh = i18n.t("cause.align_elided", "zh", n=47, a=0, b=46)
    assert "47" in zh and "（0–46）" in zh
    for lang in ("en", "zh"):
        assert "2" in i18n.t("cause.align_all_rows_help", lang, k=2)
