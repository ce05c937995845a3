"""A page's side of a long computation run by ``core.web.jobs``: wait for it with a progress bar, or say
in the page's language why a fresh measurement was not started and when to try again."""

from __future__ import annotations

from typing import Any

import streamlit as st

from core.engine.types import Phrase
from core.web import jobs, sessions, ui
from core.web.bar import Bar


def busy() -> bool:
    """Whether this session has a measurement still running (a button's callback then ignores a press)."""
    return jobs.running(st.session_state.get(jobs.MINE))


def show(job: jobs.Job | jobs.Refused, words: Phrase | None = None, quiet: bool = False) -> Any:
    """The value of ``job`` once done, waiting with a progress bar (``core.web.bar``) that says the
    measurement's own words as it reports them, and until then ``words`` (default: "Measuring …"); None,
    with a notice unless ``quiet``, when it was refused. A rerun while it waits stops only this wait: the
    job runs on, and the next run waits for it again."""
    if isinstance(job, jobs.Refused):
        if not quiet:
            st.warning(ui.t(f"measure.refused_{job.why}", s=job.retry_s))
        return None
    if not job.running:
        return jobs.wait(job)
    with Bar(words or Phrase("measure.running"), lang=ui.lang()) as bar:
        return jobs.wait(job, bar, tick=bar.draw, alive=sessions.alive())
