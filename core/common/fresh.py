"""Memory a result will keep, with its pages already in place.

Writing into memory the process has never touched costs a page fault per 4 KiB page (several microseconds
on a virtual machine). The server keeps every block of 1 MB and more in its own mapping
(``core.web.server``), so ``malloc`` hands a new trace untouched memory every time.

``empty(shape)`` is for arrays a result keeps (a trace's stream, its keys and values). Its memory is a
mapping of its own: taken from ``POOL`` (mappings that earlier arrays left behind when they were freed, at
most ``POOL_BYTES`` held in all) or else mapped with its pages in place. So the next trace of a similar
length writes into pages the process already has, and a trace's memory goes back to the pool, or to the
system, when its last view is gone. Like ``np.empty``, the contents are not set: the caller writes all of it.
"""

from __future__ import annotations

import bisect
import mmap
import threading
import weakref
from typing import Any

import numpy as np

POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux; elsewhere the pages come on first write, as numpy's do
SMALL = 1 << 20  # below this, malloc's own heap (memory already touched, mostly) serves better
STEP = 2 << 20  # mappings are made in multiples of this, so arrays of nearby sizes reuse each other's
POOL_BYTES = 64 << 20  # mappings held for reuse, at most (the rest goes back to the system)
SLACK = 1.25  # a pooled mapping serves a request of at least 1/SLACK of its size (or that rounds up to it)


def mapped_size(n: int) -> int:
    """The size of the mapping made for a request of ``n`` bytes: rounded up to a multiple of ``STEP``."""
    return -(-n // STEP) * STEP


class Pool:
    """Freed mappings, smallest first, kept for the next ``empty`` of a size they fit."""

    def __init__(self, limit: int = POOL_BYTES) -> None:
        self.limit = limit
        self._sizes: list[int] = []
        self._maps: list[mmap.mmap] = []
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self._used = False  # a take since the last ``drop_if_idle``

    @property
    def held(self) -> int:
        return sum(self._sizes)

    def take(self, n: int) -> mmap.mmap | None:
        with self._lock:
            self._used = True
            i = bisect.bisect_left(self._sizes, n)
            # the mapping this very request would have been given always fits (else arrays just above a STEP
            # multiple are never served again and fill the pool)
            if i < len(self._sizes) and self._sizes[i] <= max(mapped_size(n), n * SLACK):
                self.hits += 1
                self._sizes.pop(i)
                return self._maps.pop(i)
            self.misses += 1
            return None

    def give(self, buf: mmap.mmap) -> None:
        """Called when the array over ``buf`` is freed. A mapping that does not fit is left to be unmapped
        once its last reference goes (never closed here: the array's export may still be in release)."""
        size = len(buf)
        with self._lock:
            if sum(self._sizes) + size <= self.limit:
                i = bisect.bisect_left(self._sizes, size)
                self._sizes.insert(i, size)
                self._maps.insert(i, buf)

    def clear(self) -> None:
        with self._lock:
            self._sizes.clear()
            self._maps.clear()

    def drop_if_idle(self) -> int:
        """Hand every held mapping back to the system if nothing was taken since the last call (the server's
        trimming thread calls it: an idle server holds none of this memory). Returns the bytes dropped."""
        with self._lock:
            if self._used:
                self._used = False
                return 0
            n = sum(self._sizes)
            self._sizes.clear()
            self._maps.clear()
            return n


POOL = Pool()


def empty(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A writable array of ``shape`` whose contents are not set (write all of it), on memory whose pages are
    already in place: a pooled mapping, or a new one mapped in one call. Small arrays, and systems without
    ``MAP_POPULATE``, get ``np.empty``."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    n = count * dt.itemsize
    if n < SMALL or not POPULATE:
        return np.empty(shape, dt)
    buf = POOL.take(n)
    if buf is None:
        try:
            buf = mmap.mmap(-1, mapped_size(n), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | POPULATE)
        except OSError:  # no address space for one mapping: the allocator's way
            return np.empty(shape, dt)
    flat = np.frombuffer(buf, dtype=dt, count=count)  # every view of the result has ``flat`` as its base
    weakref.finalize(flat, POOL.give, buf)
    return flat.reshape(shape)
