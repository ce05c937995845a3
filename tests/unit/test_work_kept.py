"""Work kept, not thrown away or multiplied (issue 29, item 5): a long computation runs in a server thread
(core.web.jobs), so a rerun during it resumes it; a session has one measurement in flight; the server
starts at most so many fresh measurements a minute, and says when to retry."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from core.cause import pair, patching
from core.common import settings
from core.engine.types import TOY_ID
from core.web import cache, jobs


class Rerun(Exception):
    """What Streamlit raises in a script at its next element once a rerun is asked for."""


def _toy_pair():
    loaded = cache.get_model(TOY_ID)
    pt = pair.encode_pair(loaded.tokenizer, "kqzmwpkqzmw", "kqzmwrkqzmw")
    ans = pair.answers(loaded.tokenizer, "p", "r")
    return loaded, pt, ans


def test_a_sweep_stopped_by_a_rerun_resumes_where_it_was(monkeypatch):
    loaded, pt, ans = _toy_pair()
    site = "mlp_out"
    real_sweep, real_forward = patching.sweep, patching._forward_rows
    started, forwards, gate = [], [], threading.Event()

    def counted_sweep(loaded_, base, site_, answer, foil, *, progress=None, chunk=None):
        started.append(site_)

        def report(done: int, total: int, words=None) -> None:
            progress(done, total, words)
            if forwards:
                gate.wait(30)  # hold the sweep after its first pass until the first script run has been stopped

        return real_sweep(loaded_, base, site_, answer, foil, progress=report, chunk=1)

    def counted_forward(*a, **kw):  # one forward pass of the model: a patched run (chunk=1)
        forwards.append(1)
        return real_forward(*a, **kw)

    monkeypatch.setattr(patching, "sweep", counted_sweep)
    monkeypatch.setattr(patching, "_forward_rows", counted_forward)
    args = (loaded, tuple(pt.ids_clean), tuple(pt.ids_corrupted), ans.answer, ans.foil, site)
    at_stop: list[int] = []

    def stopped(done: int, total: int, words=None) -> None:  # the first run's bar: the language switched, Streamlit stops it here
        at_stop.append(done)
        raise Rerun

    with pytest.raises(Rerun):
        cache.cause_sweep(*args, progress=stopped)
    assert started == [site] and len(forwards) <= 1  # stopped at its start: the sweep was under way
    seen: list[int] = []
    gate.set()
    grid = cache.cause_sweep(*args, progress=lambda done, total, words=None: seen.append(done))  # the rerun
    assert started == [site]  # the same sweep, picked up: not started again from zero
    base = cache.cause_baseline(*args[:3])
    monkeypatch.setattr(patching, "_forward_rows", real_forward)
    passes = len(patching.plan(base, patching.sweep_patches(base, site)[0], chunk=1))
    assert passes > 2 and len(forwards) == passes  # every patched run once, none repeated
    assert all(s >= at_stop[0] for s in seen)  # the rerun's bar went on from where the sweep was
    np.testing.assert_array_equal(grid, real_sweep(loaded, base, site, ans.answer, ans.foil, chunk=1))
    assert cache.cause_sweep(*args) is grid and started == [site]  # later runs read the result


def test_a_second_press_while_one_measurement_runs_starts_nothing():
    r = jobs.Runner(limiter=jobs.Limiter(100))
    mine: dict = {}
    gate, runs = threading.Event(), []

    def measure(job: jobs.Job) -> int:
        runs.append(job.key)
        gate.wait(30)
        return len(runs)

    first = r.measure(("m", 1), measure, mine)
    assert isinstance(first, jobs.Job) and jobs.running(mine[jobs.MINE])
    assert r.measure(("m", 1), measure, mine) is first  # the same press again: joins the one running
    again = r.measure(("m", 2), measure, mine)  # "measure again" while it runs: refused, not queued
    assert again == jobs.Refused("busy", 1)
    other: dict = {}
    assert r.measure(("m", 1), measure, other) is first  # another visitor asking the same shares it
    gate.set()
    assert jobs.wait(first) == 1 and runs == [("m", 1)] and r.started == 1
    later = r.measure(("m", 2), measure, mine)  # once it is done, a fresh one may start
    assert isinstance(later, jobs.Job) and jobs.wait(later) == 2 and r.started == 2


def test_the_server_cap_refuses_the_next_fresh_measurement_within_a_minute():
    now = [1000.0]
    lim = jobs.Limiter(3, 60.0, clock=lambda: now[0])
    r = jobs.Runner(limiter=lim)
    done = [r.start(("m", i), lambda job: 1, limited=True) for i in range(3)]
    assert all(isinstance(j, jobs.Job) for j in done)
    now[0] += 20.0
    refused = r.start(("m", 3), lambda job: 1, limited=True)
    assert refused == jobs.Refused("rate", 40) and r.started == 3  # the oldest grant frees in 40 s
    assert r.start(("m", 0), lambda job: 1, limited=True) is done[0]  # a measurement already made: shown, never refused
    now[0] += 40.0
    assert isinstance(r.start(("m", 3), lambda job: 1, limited=True), jobs.Job) and r.started == 4


def test_rate_setting_reads_ascii_digits_only():
    default = settings.MEASURES_PER_MIN_DEFAULT
    for raw, want in (("9", 9), ("", default), ("²", default), ("0", default), ("x", default)):
        assert settings.Settings.from_env({settings.MEASURES_PER_MIN: raw}).measures_per_min == want, raw
