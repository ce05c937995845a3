"""A page's side of a long computation run by ``core.web.jobs``: wait for it with a progress bar, or say
in the page's language why a fresh measurement was not started and when to try again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from core.web import jobs, ui


def busy() -> bool:
    """Whether this session has a measurement still running (a button's callback then ignores a press)."""
    return jobs.running(st.session_state.get(jobs.MINE))


def show(job: jobs.Job | jobs.Refused, label: Callable[..., str] | None = None, quiet: bool = False) -> Any:
    """The value of ``job`` once done, waiting with a progress bar whose words are ``label(*progress)``
    (default: "Measuring …"); None, with a notice unless ``quiet``, when it was refused. A rerun while
    it waits stops only this wait: the job runs on, and the next run waits for it again."""
    if isinstance(job, jobs.Refused):
        if not quiet:
            st.warning(ui.t(f"measure.refused_{job.why}", s=job.retry_s))
        return None
    if not job.running:
        return jobs.wait(job)
    last: list[Any] = [0.0, ui.t("measure.running")]
    bar = st.progress(last[0], text=last[1])

    def update(done: int, total: int, *rest: Any) -> None:
        last[:] = [min(1.0, done / max(1, total)), label(done, total, *rest) if label else ui.t("measure.running")]
        bar.progress(last[0], text=last[1])

    try:
        return jobs.wait(job, update, tick=lambda: bar.progress(last[0], text=last[1]))
    finally:
        bar.empty()
