"""The pair page's compact alignment: a long pair shows the positions where its prompts differ, with a
little context, and one row for each run of identical positions left out — like a diff.

* the pure ``pair.compact_alignment``: every differing position and its context shown, each position
  either shown once or inside exactly one ``Elided`` marker, in order; short pairs, unequal counts,
  no difference, a difference at either end;
* the page (the embedded model, en and zh): the compact table shows the differing positions at once,
  and "Show every position" brings back the full table.
"""

from __future__ import annotations

import pytest

from conftest import app_run
from core.cause import pair
from core.common import i18n

FILLER = "Here is a sentence about a place. " * 6
LONG = (FILLER + "The Eiffel Tower is a famous landmark in the city of", FILLER + "The Colosseum is a famous landmark in the city of")


# ---------------------------------------------------------------------------------------------
# the page


def _app(lang: str = "en", **params):
    """The pair page as a shared link opens it, in ``lang``."""
    return app_run("cause_pair", lang=lang, **params)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_shows_the_difference_at_once_and_every_row_on_request(smol, lang):
    pt = pair.encode_pair(smol.tokenizer, *LONG)
    diff = pt.differing()
    assert pt.same_length and pt.n_tokens > 40 and diff and diff[0] > 30, "the difference is far down a long pair"
    at = _app(lang, clean=LONG[0], corrupt=LONG[1])
    assert not at.exception and not at.error, [e.value for e in at.exception]
    box = at.checkbox(key="cpair_all_rows")
    assert box.label == i18n.t("cause.align_all_rows", lang) and not box.value
    compact = at.dataframe[0].value
    pos, same = compact.iloc[:, 0].tolist(), compact.iloc[:, -1].tolist()
    assert len(compact) < 15 and compact.columns[0] == i18n.t("cause.col_pos", lang)
    # the differing positions, marked ✗, with their context; ⋮ rows saying how many positions are left out
    assert [p for p, s in zip(pos, same) if s == "✗"] == [str(d) for d in diff]
    assert set(range(diff[0] - 2, diff[-1] + 3)) <= {int(p) for p in pos if p != "⋮"}
    gaps = [r for r in pair.compact_alignment(pt) if isinstance(r, pair.Elided)]
    sentences = [c for c in compact.iloc[:, 1] if c.startswith("…")]
    assert sentences == [i18n.t("cause.align_elided", lang, n=g.n, a=g.start, b=g.last) for g in gaps]
    assert pos.count("⋮") == len(gaps) and len(compact) == pt.n_tokens - sum(g.n for g in gaps) + len(gaps)

    box.check().run()
    assert not at.exception
    full = at.dataframe[0].value
    assert full.iloc[:, 0].tolist() == list(range(pt.n_tokens)) and [i for i, s in enumerate(full.iloc[:, -1]) if s == "✗"] == diff
    assert full.iloc[:, 1].tolist() == [r["clean"] for r in pair.alignment(pt)]

    at.checkbox(key="cpair_all_rows").uncheck().run()
    assert len(at.dataframe[0].value) == len(compact)


def test_page_short_pair_has_every_row_and_no_checkbox(smol):
    at = _app()
    assert not at.exception and not at.checkbox
    assert len(at.dataframe[0].value) == pair.encode_pair(smol.tokenizer, "The Eiffel Tower is in the city of",
                                                          "The Colosseum is in the city of").n_tokens


def test_page_on_a_projector_compacts_the_static_table(smol):
    at = _app("zh", clean=LONG[0], corrupt=LONG[1], present="1")
    assert not at.exception and not at.dataframe and len(at.table) == 1
    cells = at.table[0].value.to_numpy()
    assert len(cells) < 15 and "⋮" in cells[:, 0] and "✗" in cells[:, -1]
    at.checkbox(key="cpair_all_rows").check().run()
    assert len(at.table[0].value) == pair.encode_pair(smol.tokenizer, *LONG).n_tokens
