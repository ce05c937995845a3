"""Every number from outside is read by one reader, and no query parameter breaks a page (issue 29, item 6).

``/quiz?quiz=²`` showed a traceback: ``str.isdigit`` is true for superscripts and other scripts' digits,
and ``int()`` then refused them (or took ``"٣"`` as 3). Now every whole number from outside — a link's
parameter, a CLI argument, a launcher setting, a JSON value — goes through ``core.common.digits``.

The parsing functions are fuzzed directly with many generated values (hypothesis); the pages with a
modest number of generated links each (an AppTest run is slow), checking no exception element and no
traceback reaches the page.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import all_text, app_run
from core.web.nav import STEMS

# text a link or a command line may carry: numbers as text, numbers of other scripts and forms, junk
ODD = ["", "²", "³", "¹⁰", "٣", "۷", "१२", "１２", "①", "Ⅻ", "1_000", "0x10", "0b1", "1e3", "1e999", "-1e999", "NaN", "nan",
       "inf", "-inf", "Infinity", " 5 ", "+3", "-0", "007", "3.0", "3.5", "٣.٥", "None", "true", "[]", "{}", "%00", "\x00", "5\x00",
       "\u200b5", "5\n", "9" * 41, "9" * 5000, "-" + "9" * 30]


# ---------------------------------------------------------------------------------------------
# the pages: generated links (a modest number: each is a full AppTest run)

PARAMS = ("layer", "head", "pos", "step", "twin", "keys", "attn_layer", "symptom", "steps", "site", "quiz", "win", "qwin", "chips",
          "greedy", "hide", "max", "metric", "part", "penalty", "seed", "show", "temp", "top_k", "top_p", "workload", "doc", "chat",
          "present", "model", "answer", "foil", "clean", "corrupt")
links = st.dictionaries(st.sampled_from(PARAMS), st.one_of(st.sampled_from(ODD[:-2]), st.text(max_size=12),
                                                           st.integers(-(10**20), 10**20).map(str)),
                        min_size=3, max_size=10)
HEAVY = {"diagnose", "serving", "cause_patching", "ablation", "long_context"}  # one example: each run computes a lot


def _check_page(stem: str, link: dict[str, str]) -> None:
    at = app_run(stem, lang="en", prompt="Hi there", **link)
    assert not at.exception, (stem, link, [e.value[:300] for e in at.exception])
    text = all_text(at)
    assert "Traceback" not in text and 'File "/' not in text, (stem, link)


@pytest.mark.parametrize("stem", STEMS)
def test_generated_links_never_break_a_page(smol, stem):
    """Three generated links per page; one for a heavy page (each of its runs computes a lot)."""
    @settings(max_examples=1 if stem in HEAVY else 3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(links)
    def run(link):
        _check_page(stem, link)

    run()


@pytest.mark.parametrize("value", ["²", "٣", "1e999", "NaN", "-1", "9" * 30])
def test_quiz_link_with_odd_numbers(smol, value):
    _check_page("quiz", {"quiz": value})
