"""A class never waits on a measurement, and never sees another visitor's (issue 39): the stepper's "Next
token" shows its own timed passes at once and measures the pure TPOT only when asked, in a server thread; a
live measurement is keyed on the visitor who asked for it, so a busy-machine figure is never shown to others."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from conftest import ROOT
from core.gen import generate
from core.web import cache, jobs, sessions


def test_next_token_does_not_measure_and_the_button_does(smol, monkeypatch):
    calls: list[int] = []
    real = generate.measure_tpot

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(generate, "measure_tpot", counted)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.session_state["lang"] = "en"
    at.session_state["prompt"] = "What is the capital of France?"
    at.switch_page("pages/generation.py")
    at.run()
    at.button(key="generation_prefill").click().run()
    at.button(key="generation_next").click().run()
    assert not at.exception and not at.error
    assert calls == [], "the first Next token measured the pure TPOT: the class waited on it"
    assert any("Measure TPOT without recording" in c.value for c in at.caption)
    assert not any("the pure decode step on this prompt" in m.value for m in at.markdown)
    at.button(key="generation_tpot_again").click().run()
    assert not at.exception and not at.error
    assert calls == [1]
    assert any("the pure decode step on this prompt" in m.value for m in at.markdown)  # its runs and spread
    at.button(key="generation_next").click().run()  # the stepper moves on: no measurement again by itself
    assert calls == [1]


def test_a_live_measurement_is_never_shared_between_visitors(monkeypatch):
    monkeypatch.setattr(cache.runner(), "limiter", jobs.Limiter(100))
    made: list[str] = []

    def compute(job):
        made.append(job.key[-1])
        return f"measured for {job.key[-1]}"

    values = {}
    for visitor in ("alice", "bob", "alice"):
        monkeypatch.setattr(sessions, "visitor", lambda v=visitor: v)
        monkeypatch.setattr(sessions, "browser", lambda v=visitor: v)
        job = cache.measurement(("measured_costs", "a-model", 0), compute)
        values.setdefault(visitor, jobs.wait(job))
    assert made == ["alice", "bob"]  # bob's was measured for bob; alice's second ask joined her own
    assert values == {"alice": "measured for alice", "bob": "measured for bob"}
