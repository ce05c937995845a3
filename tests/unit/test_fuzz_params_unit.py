"""Every number from outside is read by one reader, and no query parameter breaks a page (issue 29, item 6).

``/quiz?quiz=²`` showed a traceback: ``str.isdigit`` is true for superscripts and other scripts' digits,
and ``int()`` then refused them (or took ``"٣"`` as 3). Now every whole number from outside — a link's
parameter, a CLI argument, a launcher setting, a JSON value — goes through ``core.common.digits``.

The parsing functions are fuzzed directly with many generated values (hypothesis); the pages with a
modest number of generated links each (an AppTest run is slow), checking no exception element and no
traceback reaches the page.
"""

from __future__ import annotations

import argparse
import math
import re
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import __main__ as cli
from core.common import digits
from core.engine import config as cfgread
from core.engine.types import ConfigError
from core.learn import quiz
from core.web import ui
from deploy import serve

# text a link or a command line may carry: numbers as text, numbers of other scripts and forms, junk
ODD = ["", "²", "³", "¹⁰", "٣", "۷", "१२", "１２", "①", "Ⅻ", "1_000", "0x10", "0b1", "1e3", "1e999", "-1e999", "NaN", "nan",
       "inf", "-inf", "Infinity", " 5 ", "+3", "-0", "007", "3.0", "3.5", "٣.٥", "None", "true", "[]", "{}", "%00", "\x00", "5\x00",
       "\u200b5", "5\n", "9" * 41, "9" * 5000, "-" + "9" * 30]
values = st.one_of(
    st.sampled_from(ODD),
    st.integers(-(10**40), 10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet=st.characters(categories=["Nd", "No", "Nl"]), min_size=1, max_size=6),
    st.text(max_size=40),
)
ASCII_WHOLE = re.compile(r"[ \t]*[+-]?[0-9]{1,40}[ \t]*")


# ---------------------------------------------------------------------------------------------
# the one reader


def test_superscripts_and_other_scripts_digits_are_no_numbers():
    for s in ("²", "٣", "１２", "1_0", "①", "\u200b5", "5\n"):
        assert digits.whole(s) is None, s
    assert [digits.whole(s) for s in ("12", " 7 ", "+3", "-2", "007")] == [12, 7, 3, -2, 7]
    assert digits.whole(4096.0, text=False) == 4096 and digits.whole("5", text=False) is None
    assert digits.whole(True) is None and digits.whole(float("nan")) is None and digits.whole(2.5) is None


def test_one_checked_helper_says_why():
    """digits.check: the CLI, the launcher, a config and a link read its (n, why); each says it in its own words."""
    assert digits.check("5", 1, 9) == (5, digits.OK) and digits.check("5", 1, 9).ok
    assert digits.check("0", 1, 9) == (0, digits.BELOW) and digits.check("12", 1, 9) == (12, digits.ABOVE)
    assert digits.check("²", 1) == (None, digits.NOT_WHOLE) and digits.check(float("inf"), 1, text=False) == (None, digits.NOT_FINITE)
    assert digits.check("5", 1, text=False) == (None, digits.NOT_WHOLE) and digits.whole_in("12", 1, 9) is None


def test_quiz_link_with_a_superscript_is_dropped():
    """The issue's case: parse_seed used str.isdigit, then int() raised."""
    assert quiz.parse_seed("²") is None and quiz.parse_seed("٣") is None
    assert quiz.parse_seed("12") == 12 and quiz.parse_seed(str(quiz.SEED_MAX)) is None


@settings(max_examples=1500, deadline=None, database=None)
@given(values)
def test_whole_reads_ascii_digits_only(s):
    n = digits.whole(s)
    if ASCII_WHOLE.fullmatch(s):
        assert n == int(s.strip(" \t"))
    else:
        assert n is None


@settings(max_examples=800, deadline=None, database=None)
@given(values)
def test_parse_seed_never_raises(s):
    v = quiz.parse_seed(s)
    assert v is None or (isinstance(v, int) and 0 <= v < quiz.SEED_MAX)


@settings(max_examples=500, deadline=None, database=None)
@given(st.one_of(values, st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                 st.lists(st.integers(), max_size=2)))
def test_config_whole_refuses_with_a_config_error(v):
    try:
        n = cfgread.whole(v, "num_hidden_layers")
    except ConfigError:
        return
    assert isinstance(n, int) and not isinstance(v, (str, bool)) and n >= 1 and n == v


@settings(max_examples=800, deadline=None, database=None)
@given(values)
def test_cli_and_launcher_arguments_refuse_in_one_sentence(s):
    for parse in (cli._int_arg("--steps", 1, 4096), serve.port_arg, serve.replicas_arg):
        try:
            v = parse(s)
        except argparse.ArgumentTypeError:
            continue
        assert isinstance(v, int) and ASCII_WHOLE.fullmatch(s)


@pytest.fixture
def fake_url(monkeypatch):
    """``ui``'s readers over a plain dict standing for st.query_params."""
    url: dict[str, str] = {}
    monkeypatch.setattr(ui, "st", SimpleNamespace(query_params=url, session_state={}))
    return url


@settings(max_examples=600, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values)
def test_url_readers_never_raise_and_stay_in_range(fake_url, s):
    fake_url["x"] = s
    v = ui.qp_int("x", 3, 0, 9)
    assert isinstance(v, int) and 0 <= v <= 9
    n = digits.whole(s)
    assert v == (3 if n is None else max(0, min(9, n)))
    f = ui.qp_float("x", 0.5, 0.0, 2.0, 0.05)
    assert isinstance(f, float) and math.isfinite(f) and 0.0 <= f <= 2.0
    assert ui.qp_choice("x", (16, 32, 64), 32) in (16, 32, 64)
    assert ui.qp_bool("x", False) in (True, False)
