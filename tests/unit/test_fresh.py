"""core.common.fresh: kept arrays on memory whose pages are already in place, handed back to a bounded pool
when their last view is gone (issue 28: a trace's stream, keys and values)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from core.common import fresh

pytestmark = pytest.mark.skipif(not fresh.POPULATE, reason="MAP_POPULATE is Linux's")


def test_a_freed_array_hands_its_mapping_to_the_next():
    pool = fresh.Pool()
    old, fresh.POOL = fresh.POOL, pool
    try:
        a = fresh.empty((3, 1000, 1000))  # 12 MB
        a[...] = 7.0
        assert a.flags.writeable and a.shape == (3, 1000, 1000) and a.dtype == np.float32
        addr = a.__array_interface__["data"][0]
        view = a[1]  # a view keeps the mapping: nothing goes back yet
        del a
        gc.collect()
        assert pool.held == 0 and float(view[0, 0]) == 7.0
        del view
        gc.collect()
        assert pool.held == 12 << 20  # rounded up to fresh.STEP (2 MiB)
        b = fresh.empty((3, 1000, 1000))
        assert b.__array_interface__["data"][0] == addr and pool.hits == 1 and pool.held == 0
    finally:
        fresh.POOL = old


def test_the_pool_holds_at_most_its_limit_and_serves_only_near_sizes():
    pool = fresh.Pool(limit=10 << 20)
    old, fresh.POOL = fresh.POOL, pool
    try:
        arrays = [fresh.empty((1 << 20,)) for _ in range(4)]  # 4 MiB each (mapped in 4 MiB)
        del arrays
        gc.collect()
        assert pool.held == 8 << 20  # two kept, two given back to the system
        small = fresh.empty((300_000,))  # 1.2 MB: a 4 MiB mapping is more than SLACK × its size
        assert pool.hits == 0 and pool.held == 8 << 20
        del small
    finally:
        fresh.POOL = old


def test_an_array_just_over_a_step_gets_its_own_mapping_back():
    """A 2.2 MB array is mapped in 4 MiB (1.9 × its size, more than SLACK): the mapping made for it must still
    serve the next array of that size. Before, it never did, and every trace's identity sample (2.2 MB at 256
    tokens) mapped new memory and left one more unusable 4 MiB mapping in the pool, until the pool was full
    and the stream's own 20 MiB mapping no longer fitted back (issue 28: 12 ms of a 256-token trace's 24 ms
    outside the forward)."""
    pool = fresh.Pool()
    old, fresh.POOL = fresh.POOL, pool
    try:
        shape = (2, 30, 16, 576)  # 2,211,840 bytes
        assert fresh.mapped_size(2_211_840) == 4 << 20
        for _ in range(5):
            a = fresh.empty(shape)
            a[...] = 1.0
            del a
            gc.collect()
        assert (pool.misses, pool.hits, pool.held) == (1, 4, 4 << 20)
    finally:
        fresh.POOL = old


def test_small_arrays_are_numpys_own():
    a = fresh.empty((10, 10), np.int64)
    assert isinstance(a.base, type(None)) and a.shape == (10, 10) and a.dtype == np.int64


def test_an_idle_pool_gives_its_mappings_back():
    pool = fresh.Pool()
    old, fresh.POOL = fresh.POOL, pool
    try:
        a = fresh.empty((1 << 20,))
        del a
        gc.collect()
        assert pool.drop_if_idle() == 0 and pool.held == 4 << 20  # taken since the last look: kept
        assert pool.drop_if_idle() == 4 << 20 and pool.held == 0  # nothing taken since: dropped
    finally:
        fresh.POOL = old
