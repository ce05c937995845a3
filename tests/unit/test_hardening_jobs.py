"""Heavy work is capped and fair (issue 39): sweeps, attributions and measurements run at most ``slots`` at once
per server (the others queue, saying how many are ahead); a job whose sessions have all gone is cancelled and
its slot given to the next; one browser's tabs take at most their share of the server's measurements."""

from __future__ import annotations

import threading
import time

import pytest

from core.engine.types import Phrase
from core.web import jobs


def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_heavy_jobs_run_one_at_a_time_and_the_next_says_it_waits():
    r = jobs.Runner(slots=1)
    gate, inside, peak = threading.Event(), [], [0]

    def compute(job):
        inside.append(job.key)
        peak[0] = max(peak[0], len(inside))
        gate.wait(10)
        inside.remove(job.key)
        return job.key

    a = r.start("a", compute, heavy=True)
    _until(lambda: inside == ["a"])
    b = r.start("b", compute, heavy=True)
    _until(lambda: b.progress is not None)
    assert inside == ["a"] and b.progress[2] == Phrase("jobs.queued", {"n": 1})
    gate.set()
    assert jobs.wait(a) == "a" and jobs.wait(b) == "b"
    assert peak[0] == 1


def test_a_job_whose_sessions_have_gone_is_cancelled_and_frees_its_slot(monkeypatch):
    monkeypatch.setattr(jobs, "ORPHAN_S", 0.3)
    r = jobs.Runner(slots=1)
    steps = [0]

    def sweep(job):
        for i in range(10_000):  # a long sweep: one patched run a step
            job.report(i, 10_000)
            steps[0] += 1
            time.sleep(0.01)
        return "finished"

    job = r.start("sweep", sweep, heavy=True)
    tab_open = [True]
    waiter_error: list[BaseException] = []

    def tab():
        try:
            jobs.wait(job, poll=0.02, alive=lambda: tab_open[0])
        except BaseException as e:
            waiter_error.append(e)

    t = threading.Thread(target=tab)
    t.start()
    _until(lambda: steps[0] > 5)
    tab_open[0] = False  # the student closes the tab
    t.join(5)
    assert isinstance(waiter_error[0], jobs.Cancelled)
    _until(lambda: job.done.is_set(), timeout=5)
    assert isinstance(job.error, jobs.Cancelled) and steps[0] < 10_000
    assert r.job("sweep") is None  # computed anew if asked again
    nxt = r.start("next", lambda j: "ran", heavy=True)
    assert jobs.wait(nxt) == "ran"  # the slot was given back


def test_a_rerun_does_not_cancel_the_job(monkeypatch):
    monkeypatch.setattr(jobs, "ORPHAN_S", 0.5)
    r = jobs.Runner(slots=1)
    gate = threading.Event()

    def sweep(job):
        while not gate.is_set():
            job.report(0, 1)
            time.sleep(0.01)
        return 7

    job = r.start("k", sweep, heavy=True)
    stopper = threading.Thread(target=lambda: (time.sleep(0.2), gate.set()))
    for _ in range(3):  # three short waits, each cut by a rerun, each back within ORPHAN_S
        done = threading.Event()
        threading.Thread(target=lambda d=done: (time.sleep(0.1), d.set())).start()
        with pytest.raises(jobs.Cancelled):
            jobs.wait(job, poll=0.02, alive=lambda d=done: not d.is_set())
    stopper.start()
    assert jobs.wait(job) == 7


def test_one_browser_takes_at_most_half_the_servers_measurements():
    lim = jobs.Limiter(4, 60.0, clock=lambda: 0.0)
    assert [lim.take("alice") for _ in range(3)] == [0.0, 0.0, 60.0]
    assert lim.take("bob") == 0.0 and lim.take("carol") == 0.0
    assert lim.take("dave") == 60.0  # the server's own limit


def test_four_tabs_of_one_browser_do_not_use_the_whole_quota():
    r = jobs.Runner(limiter=jobs.Limiter(4, 60.0, clock=lambda: 0.0), slots=4)
    tabs = [{} for _ in range(4)]
    got = [r.measure(("m", i), lambda j: 1, tab, who="browser-1") for i, tab in enumerate(tabs)]
    assert sum(isinstance(g, jobs.Job) for g in got) == 2
    assert [g.why for g in got if isinstance(g, jobs.Refused)] == ["rate", "rate"]
    assert isinstance(r.measure(("m", 9), lambda j: 1, {}, who="browser-2"), jobs.Job)  # another student still can
