"""Long computations that outlive a script run, and the server's limit on fresh measurements.

A Streamlit rerun (a language switch, a slider moved, a second press) stops the running script at its
next element; a computation made in the script's own thread is lost with it, and the next run starts it
again from zero. Here a long computation (a patching sweep, the attributions, a timing measurement)
runs in a thread of its own, keyed: the script only waits on it, drawing its progress (``wait``; the job's
``report`` is the computation's ``core.common.progress.Progress``), and a
rerun waits again on the same key, so it picks the work up where it is, never restarting it. The
finished results are kept (least recently used first out, bounded in entries: they are small — grids
and timings, not traces). Two sessions asking for the same key share one computation.

Measurements time the machine every student shares, so they are rationed: ``Limiter`` caps the fresh
ones per server per minute (``XRAY_MEASURES_PER_MIN``, 4 by default), and ``Runner.measure`` gives a
session at most one measurement in flight. A refusal is a ``Refused`` (why, and in how many seconds to
retry) for the page to say in its language; waiting on a running or finished one is never refused.

No Streamlit here: ``core.web.cache`` holds the one ``Runner`` per process (``st.cache_resource``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, MutableMapping
from dataclasses import dataclass
from typing import Any

from core.common import settings
from core.common.progress import Progress

WINDOW_S = 60.0
POLL_S = 0.25  # how often a waiting script looks at its job (and lets Streamlit stop it for a rerun)
MINE = "xray_measuring"  # the session-state key of a session's own measurement


class Limiter:
    """At most ``cap`` grants in any ``window_s`` seconds (a sliding window), thread-safe."""

    def __init__(self, cap: int, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        if cap < 1:
            raise ValueError("a limiter must allow at least one")
        self.cap, self.window_s, self._clock = int(cap), float(window_s), clock
        self._grants: deque[float] = deque()
        self._lock = threading.Lock()

    def take(self) -> float:
        """0.0 when granted (and counted); else the seconds until the next grant would be allowed."""
        with self._lock:
            now = self._clock()
            while self._grants and now - self._grants[0] >= self.window_s:
                self._grants.popleft()
            if len(self._grants) < self.cap:
                self._grants.append(now)
                return 0.0
            return max(0.001, self._grants[0] + self.window_s - now)


class Job:
    """One keyed computation in its own thread: ``report(done, total, words)`` from inside it (its progress,
    kept for every session that waits on it), ``done`` when over."""

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.progress: tuple[int, int, Any] | None = None  # the last (done, total, words) reported

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def report(self, done: int, total: int, words: Any = None) -> None:
        self.progress = (int(done), int(total), words)


@dataclass(frozen=True)
class Refused:
    """A fresh measurement not started: ``why`` is "busy" (this session's own is still running) or
    "rate" (the server's limit per minute), ``retry_s`` when to try again (whole seconds, ≥ 1)."""

    why: str
    retry_s: int


def running(job: Any) -> bool:
    """Whether ``job`` (a Job, or anything a session holds instead) is a computation still under way."""
    return isinstance(job, Job) and job.running


class Runner:
    """Keyed jobs, each computed once in its own daemon thread; the finished ones kept (``max_results``)."""

    def __init__(self, max_results: int = 64, limiter: Limiter | None = None) -> None:
        self.max_results = int(max_results)
        self.limiter = limiter or Limiter(settings.get().measures_per_min)
        self._jobs: OrderedDict[Hashable, Job] = OrderedDict()
        self._lock = threading.Lock()
        self.started = 0  # computations started, ever (tests count them)

    def job(self, key: Hashable) -> Job | None:
        """The running or successfully finished job of ``key`` (None: not known, or it failed)."""
        with self._lock:
            j = self._jobs.get(key)
            if j is None or (j.done.is_set() and j.error is not None):
                return None
            self._jobs.move_to_end(key)
            return j

    def start(self, key: Hashable, compute: Callable[[Job], Any], *, limited: bool = False) -> Job | Refused:
        """The job of ``key``: the one running or finished, or a new one running ``compute(job)`` — unless
        ``limited`` and the limiter refuses a fresh computation."""
        with self._lock:
            j = self._jobs.get(key)
            if j is not None and not (j.done.is_set() and j.error is not None):
                self._jobs.move_to_end(key)
                return j
            if limited:
                wait = self.limiter.take()
                if wait:
                    return Refused("rate", max(1, math.ceil(wait)))
            j = self._jobs[key] = Job(key)
            self.started += 1
            self._evict()
        threading.Thread(target=self._run, args=(j, compute), daemon=True, name="xray-job").start()
        return j

    def measure(self, key: Hashable, compute: Callable[[Job], Any], mine: MutableMapping[str, Any]) -> Job | Refused:
        """A measurement for the session whose state is ``mine``: the job of ``key`` if it runs or has
        finished (joined, never refused); else a fresh one, unless this session's own is still running
        ("busy") or the server's limit per minute is reached ("rate")."""
        j = self.job(key)
        if j is None:
            own = mine.get(MINE)
            if running(own) and own.key != key:
                return Refused("busy", 1)
            j = self.start(key, compute, limited=True)
        if isinstance(j, Job):
            mine[MINE] = j
        return j

    def _run(self, job: Job, compute: Callable[[Job], Any]) -> None:
        try:
            job.value = compute(job)
        except BaseException as e:  # kept for the waiting script to raise (a failed job is computed anew next time)
            job.error = e
        finally:
            job.done.set()

    def _evict(self) -> None:
        finished = [k for k, j in self._jobs.items() if j.done.is_set()]  # oldest first; a running job stays
        for k in finished[: max(0, len(self._jobs) - self.max_results)]:
            del self._jobs[k]

    def clear(self) -> None:
        with self._lock:
            for k in [k for k, j in self._jobs.items() if j.done.is_set()]:
                del self._jobs[k]


def wait(job: Job, progress: Progress | None = None, tick: Callable[[], None] | None = None,
         poll: float = POLL_S) -> Any:
    """``job``'s value, once it is done (its error raised, if it failed). Meanwhile ``progress(done, total, words)``
    each time its progress changes and ``tick()`` every ``poll`` seconds: each draws an element, where
    Streamlit may stop this script for a rerun — the job itself runs on, and the next run waits for it."""
    seen = None
    while not job.done.wait(poll):
        p = job.progress
        if progress is not None and p is not None and p != seen:
            seen = p
            progress(*p)
        if tick is not None:
            tick()
    if job.error is not None:
        raise job.error
    return job.value
