"""What a crafted browser message or a page error can do, and no longer does (issue 29, item 11).

* Streamlit's ``client.showErrorDetails`` is "type": an uncaught error shows its type only, never its
  message or traceback, so no server path reaches a page.
* A crafted selection event (``x = 1e999``, NaN, text, a point off the grid) picks no cell of the patching
  grid, and raises nothing (``new_click`` did ``round(float("inf"))``: OverflowError).
* A NaN (or ∞) sent into a number input is read as nothing sent, on that run and on every later one (it
  broke the session for good: Streamlit's ``int(nan)`` ran before the script on every run).
"""

from __future__ import annotations

import math
import tomllib
from types import SimpleNamespace

import pytest

from conftest import ROOT
from core.web import cause, guards, ui

# ---------------------------------------------------------------------------------------------
# error details


def test_error_details_show_the_type_only():
    conf = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert conf["client"]["showErrorDetails"] in ("type", "none")
    from streamlit import config

    config.get_config_options(force_reparse=True)  # as a server started in the project's folder reads it
    assert config.get_option("client.showErrorDetails") in ("type", "none")


# ---------------------------------------------------------------------------------------------
# a crafted selection event


@pytest.fixture
def session(monkeypatch):
    state: dict = {}
    monkeypatch.setattr(cause, "st", SimpleNamespace(session_state=state))
    return state


@pytest.mark.parametrize("point", [{"x": 1e999, "y": 0}, {"x": 0, "y": -1e999}, {"x": float("nan"), "y": 1}, {"x": "1e999", "y": 0},
                                   {"x": "abc", "y": 0}, {"x": None, "y": 0}, {"x": [1], "y": 0}, {"x": 7, "y": 0}, {"x": 0, "y": -3},
                                   {"x": 2**2000, "y": 0}, "not a point", 5])
def test_a_crafted_click_picks_no_cell(session, point):
    session["grid"] = {"selection": {"points": [point]}}
    assert cause.new_click("grid", 3, 4) is None


@pytest.mark.parametrize("sel", [{"selection": "x"}, {"selection": {"points": {"0": {}}}}, {"selection": {"points": "abc"}}, "x", 3])
def test_a_malformed_selection_picks_no_cell(session, sel):
    session["grid"] = sel
    assert cause.new_click("grid", 3, 4) is None


def test_a_real_click_still_picks_its_cell(session):
    session["grid"] = {"selection": {"points": [{"x": 2, "y": 1.2}]}}
    assert cause.new_click("grid", 3, 4) == (1, 2)
    assert cause.new_click("grid", 3, 4) is None  # the same selection again: nothing new


# ---------------------------------------------------------------------------------------------
# NaN into a number input


def test_the_number_guard_is_installed():
    assert ui.GUARDED and guards.install()  # Streamlit's number-input reader is there, and guarded once
    from streamlit.elements.widgets.number_input import NumberInputSerde
    from streamlit.proto.NumberInput_pb2 import NumberInput

    serde = NumberInputSerde(value=8, data_type=NumberInput.INT, min_value=1, max_value=64)
    assert serde.deserialize(float("nan")) == 8 and serde.deserialize(math.inf) == 8 and serde.deserialize(5) == 5
