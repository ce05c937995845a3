"""A cache bounded by bytes, not entries: a few long traces and many short ones both fit.

``ByteLRU.get(key, compute)`` returns the cached value or computes it once (concurrent askers wait for the
one computation and, with ``progress``, all see its reports through ``ByteLRU.reporter``), then evicts the
least recently used values until the total is within the budget; a value bigger than the budget is
returned but not kept. Values are shared, not copied: they must be read-only (``Trace`` marks its arrays so).
``expire(idle_s)`` / ``expire_idle`` drop what nobody has read for ``idle_s`` seconds (the server's trimming
thread), so a burst of sessions does not hold the server's memory afterwards.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from core.common.progress import Progress


def size_of(value: Any) -> int:
    """Bytes a cached value holds: its ``nbytes`` (a Trace, a LayerDetail, an array), else 0."""
    n = getattr(value, "nbytes", 0)
    return int(n) if isinstance(n, (int, float)) else 0


POLL_S = 0.25  # how often a waiting thread looks at the computing thread's progress
LIVE: weakref.WeakSet[ByteLRU] = weakref.WeakSet()  # every ByteLRU made in this process (``expire_idle``)


def expire_idle(idle_s: float) -> int:
    """``expire(idle_s)`` in every live ByteLRU; how many values were dropped."""
    return sum(c.expire(idle_s) for c in list(LIVE))


class ByteLRU:
    def __init__(self, max_bytes: int, size: Callable[[Any], int] = size_of,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_bytes < 0:
            raise ValueError("a cache budget cannot be negative")
        self.max_bytes = int(max_bytes)
        self._size = size
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._inflight: dict[Hashable, threading.Event] = {}
        self._progress: dict[Hashable, tuple[int, int, Any]] = {}  # the last (done, total, words) of a key being computed
        self._clock = clock
        self._used: dict[Hashable, float] = {}  # when each value was last read or stored
        self.total = 0
        self.hits = 0
        self.misses = 0
        LIVE.add(self)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key: Hashable, compute: Callable[[], Any], progress: Progress | None = None) -> Any:
        """The cached value of ``key``, or ``compute()``'s, computed once however many threads ask.
        ``progress(done, total, words)`` is called while another thread computes the key, with what that
        computation last told ``reporter(key, …)`` (polled every ``POLL_S``)."""
        while True:
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    self._used[key] = self._clock()
                    self.hits += 1
                    return self._items[key][0]
                wait = self._inflight.get(key)
                if wait is None:
                    done = self._inflight[key] = threading.Event()
                    self.misses += 1
                    break
            # another thread is computing this key: take its result (or retry if it failed)
            seen = None
            while not wait.wait(POLL_S if progress else None):
                now = self._progress.get(key)
                if now is not None and now != seen:
                    seen = now
                    progress(*now)
        try:
            value = compute()
            self.put(key, value)
            return value
        finally:
            with self._lock:
                self._inflight.pop(key, None)
                self._progress.pop(key, None)
            done.set()

    def reporter(self, key: Hashable, progress: Progress | None = None) -> Progress:
        """The progress callback for ``key``'s computation: it records (done, total, words) for the threads
        waiting on the key and passes it on to ``progress`` (the computing session's own bar)."""
        def report(done: int, total: int, words: Any = None) -> None:
            self._progress[key] = (int(done), int(total), words)
            if progress is not None:
                progress(done, total, words)

        return report

    def put(self, key: Hashable, value: Any) -> None:
        n = self._size(value)
        with self._lock:
            if key in self._items:
                self.total -= self._items.pop(key)[1]
                self._used.pop(key, None)
            if n > self.max_bytes:
                return  # bigger than the whole budget: used once, not kept
            self._items[key] = (value, n)
            self._used[key] = self._clock()
            self.total += n
            while self.total > self.max_bytes and self._items:
                old, (_, m) = self._items.popitem(last=False)
                self._used.pop(old, None)
                self.total -= m

    def expire(self, idle_s: float) -> int:
        """Drop the values not read for ``idle_s`` seconds (least recently used first); how many."""
        with self._lock:
            now, dropped = self._clock(), 0
            for k in list(self._items):  # least recently used first: stop at the first one still in use
                if now - self._used.get(k, now) < idle_s:
                    break
                self.total -= self._items.pop(k)[1]
                self._used.pop(k, None)
                dropped += 1
            return dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._used.clear()
            self.total = 0

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"entries": len(self._items), "bytes": self.total, "max_bytes": self.max_bytes,
                    "hits": self.hits, "misses": self.misses}
