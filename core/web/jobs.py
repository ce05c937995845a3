"""Long computations that outlive a script run, and the server's limit on fresh measurements.

A Streamlit rerun stops the script at its next element, so a long computation (a patching sweep, the
attributions, a timing) runs in a thread of its own, keyed: the script only ``wait``s on it, drawing its
progress, and a rerun waits again on the same key instead of restarting it. Finished results are kept
(LRU, bounded). Two sessions asking for the same key share one computation.

``Limiter`` rations fresh measurements per server per minute (``XRAY_MEASURES_PER_MIN``) and per browser;
``Runner.measure`` gives a session one measurement in flight; a refusal is a ``Refused`` (why, and when to
retry). Heavy jobs run at most ``XRAY_JOBS`` at a time, the others queued; a job nobody has waited on for
``ORPHAN_S`` seconds is cancelled at its next progress report (``Cancelled``).

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
from core.engine.types import Phrase

ORPHAN_S = 10.0  # a job without a waiting session for this long is cancelled (a rerun comes back within it)
WINDOW_S = 60.0
POLL_S = 0.25  # how often a waiting script looks at its job (and lets Streamlit stop it for a rerun)
MINE = "xray_measuring"  # the session-state key of a session's own measurement


class Cancelled(Exception):
    """A job stopped because no session waits on it any more."""


class Limiter:
    """At most ``cap`` grants in any ``window_s`` seconds (a sliding window), and at most ``per_who`` of them
    to one asker (a browser; default half of ``cap``, at least one), thread-safe."""

    def __init__(self, cap: int, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic,
                 per_who: int | None = None) -> None:
        if cap < 1:
            raise ValueError("a limiter must allow at least one")
        self.cap, self.window_s, self._clock = int(cap), float(window_s), clock
        self.per_who = max(1, min(self.cap, per_who if per_who is not None else self.cap // 2))
        self._grants: deque[tuple[float, Hashable]] = deque()
        self._lock = threading.Lock()

    def take(self, who: Hashable = None) -> float:
        """0.0 when granted (and counted); else the seconds until the next grant would be allowed (the
        server's window, or ``who``'s own share of it)."""
        with self._lock:
            now = self._clock()
            while self._grants and now - self._grants[0][0] >= self.window_s:
                self._grants.popleft()
            mine = [t for t, w in self._grants if w == who] if who is not None else []
            if len(mine) >= self.per_who:
                return max(0.001, mine[0] + self.window_s - now)
            if len(self._grants) < self.cap:
                self._grants.append((now, who))
                return 0.0
            return max(0.001, self._grants[0][0] + self.window_s - now)


class Job:
    """One keyed computation in its own thread: ``report(done, total, words)`` from inside it (its progress,
    kept for every session that waits on it), ``done`` when over."""

    def __init__(self, key: Hashable, clock: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.progress: tuple[int, int, Any] | None = None  # the last (done, total, words) reported
        self._clock = clock
        self.waiters = 0  # sessions waiting on it now (``wait``)
        self.alone_since: float | None = clock()  # when the last waiter left (None while someone waits)
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def orphaned(self) -> bool:
        """Whether nobody has waited on it for ``ORPHAN_S`` seconds."""
        with self._lock:
            return self.alone_since is not None and self._clock() - self.alone_since >= ORPHAN_S

    def joined(self, delta: int) -> None:
        with self._lock:
            self.waiters = max(0, self.waiters + delta)
            self.alone_since = self._clock() if self.waiters == 0 else None

    def report(self, done: int, total: int, words: Phrase | str | None = None) -> None:
        """The computation's progress; raises ``Cancelled`` (out of the computation) once it is orphaned."""
        if self.orphaned():
            raise Cancelled(self.key)
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

    def __init__(self, max_results: int = 64, limiter: Limiter | None = None, slots: int | None = None) -> None:
        self.max_results = int(max_results)
        self.limiter = limiter or Limiter(settings.get().measures_per_min)
        self.slots = slots or settings.get().jobs
        self._heavy = threading.Semaphore(self.slots)
        self._queued: list[Job] = []  # heavy jobs waiting for a slot, first come first
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

    def start(self, key: Hashable, compute: Callable[[Job], Any], *, limited: bool = False, heavy: bool = False,
              who: Hashable = None) -> Job | Refused:
        """The job of ``key``: the one running or finished, or a new one running ``compute(job)`` — unless
        ``limited`` and the limiter refuses a fresh computation (to ``who``, a browser). ``heavy``: it waits
        for one of the server's ``slots`` first."""
        with self._lock:
            j = self._jobs.get(key)
            if j is not None and not (j.done.is_set() and j.error is not None):
                self._jobs.move_to_end(key)
                return j
            if limited:
                wait = self.limiter.take(who)
                if wait:
                    return Refused("rate", max(1, math.ceil(wait)))
            j = self._jobs[key] = Job(key)
            self.started += 1
            self._evict()
            if heavy:
                self._queued.append(j)
        threading.Thread(target=self._run, args=(j, compute, heavy), daemon=True, name="xray-job").start()
        return j

    def measure(self, key: Hashable, compute: Callable[[Job], Any], mine: MutableMapping[str, Any],
                who: Hashable = None) -> Job | Refused:
        """A measurement for the session whose state is ``mine`` (in the browser ``who``): the job of ``key``
        if it runs or has finished (joined, never refused); else a fresh one, unless this session's own is
        still running ("busy") or the server's limit per minute, or this browser's share of it, is reached
        ("rate")."""
        j = self.job(key)
        if j is None:
            own = mine.get(MINE)
            if running(own) and own.key != key:
                return Refused("busy", 1)
            j = self.start(key, compute, limited=True, heavy=True, who=who)
        if isinstance(j, Job):
            mine[MINE] = j
        return j

    def _take_slot(self, job: Job) -> None:
        """Wait for a heavy slot, saying how many jobs are ahead; ``Cancelled`` if the job is orphaned meanwhile."""
        while not self._heavy.acquire(timeout=POLL_S):
            with self._lock:
                ahead = self._queued.index(job) if job in self._queued else 0
                running = self.slots - self._heavy._value  # Semaphore's count of free slots
            job.report(0, 1, Phrase("jobs.queued", {"n": ahead + max(1, running)}))
        with self._lock:
            if job in self._queued:
                self._queued.remove(job)

    def _run(self, job: Job, compute: Callable[[Job], Any], heavy: bool = False) -> None:
        slot = False
        try:
            if heavy:
                self._take_slot(job)
                slot = True
            job.value = compute(job)
        except BaseException as e:  # kept for the waiting script to raise (a failed job is computed anew next time)
            job.error = e
        finally:
            if heavy:
                with self._lock:
                    if job in self._queued:
                        self._queued.remove(job)
            if slot:
                self._heavy.release()
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
         poll: float = POLL_S, alive: Callable[[], bool] | None = None) -> Any:
    """``job``'s value, once it is done (its error raised, if it failed). Meanwhile ``progress(done, total, words)``
    each time its progress changes and ``tick()`` every ``poll`` seconds: each draws an element, where
    Streamlit may stop this script for a rerun — the job itself runs on, and the next run waits for it.
    ``alive()``: whether the waiting session still has its browser; once not, the wait ends (``Cancelled``)
    and, nobody else waiting, the job is cancelled ``ORPHAN_S`` seconds later."""
    seen = None
    job.joined(+1)
    try:
        while not job.done.wait(poll):
            p = job.progress
            if progress is not None and p is not None and p != seen:
                seen = p
                progress(*p)
            if tick is not None:
                tick()
            if alive is not None and not alive():
                raise Cancelled(job.key)
    finally:
        job.joined(-1)
    if job.error is not None:
        raise job.error
    return job.value
