"""Work kept, not thrown away or multiplied (issue 29, item 5): a long computation runs in a server thread
(core.web.jobs), so a rerun during it resumes it; a session has one measurement in flight; the server
starts at most so many fresh measurements a minute, and says when to retry."""

from __future__ import annotations

import pytest

from core.common import i18n
from core.web import cache, jobs


def test_the_press_callbacks_ignore_a_press_while_a_measurement_runs(monkeypatch):
    """The pages' button callbacks: no new run number while this session's measurement is in flight."""
    from streamlit.testing.v1 import AppTest

    from tests.conftest import ROOT

    running = jobs.Job(("held",))  # a measurement of this session, still running
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["model"] = "toy"
    at.switch_page("pages/kv_cache.py")
    at.run()
    at.session_state[jobs.MINE] = running
    at.button(key="kv_cache_measure").click().run()
    assert "kv_cache_cmp" not in at.session_state  # the press waits for the running one
    at.session_state[jobs.MINE] = None
    at.button(key="kv_cache_measure").click().run()
    assert at.session_state["kv_cache_cmp"][5] == 1 and not at.exception


def test_the_kv_costs_button_ignores_a_press_while_a_measurement_runs():
    """The KV page's "Measure the costs again" is a measurement like the others (issue 29 item 5): a press
    while this session's measurement runs starts no new one; once it is done, a press measures afresh."""
    from streamlit.testing.v1 import AppTest

    from tests.conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params["model"] = "toy"
    at.switch_page("pages/kv_cache.py")
    at.run()
    assert not at.exception
    at.session_state[jobs.MINE] = jobs.Job(("held",))  # a measurement of this session, still running
    at.button(key="kv_cache_costs_again").click().run()
    assert "kv_cache_costs_run" not in at.session_state or at.session_state["kv_cache_costs_run"] == 0
    at.session_state[jobs.MINE] = None
    at.button(key="kv_cache_costs_again").click().run()
    assert at.session_state["kv_cache_costs_run"] == 1 and not at.exception


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_refusal_says_when_to_retry_in_the_pages_language(lang, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.conftest import ROOT

    monkeypatch.setattr(cache.runner(), "limiter", jobs.Limiter(1, 60.0, clock=lambda: 0.0))
    cache.runner().limiter.take()  # this minute's one fresh measurement is gone
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update({"lang": lang, "model": "toy"})
    at.switch_page("pages/kv_cache.py")
    at.run()
    at.slider(key="kv_cache_n").set_value(2).run()
    at.button(key="kv_cache_measure").click().run()
    assert not at.exception
    want = i18n.t("measure.refused_rate", lang, s=60)
    assert [w.value for w in at.warning if w.value == want], [w.value for w in at.warning]
