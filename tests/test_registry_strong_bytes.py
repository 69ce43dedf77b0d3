"""The registry's table of canonicals held strongly (tuples, NamedTuples: no weak reference) is
bounded by the bytes of the arrays they hold, not by their count alone (attack round 9a, finding
10): an interned rebuilt `Config(table, name)` kept its table's read-only copy (and the table's
bytes in its key) after the program dropped every reference, for up to 4,096 of them."""

import gc
import weakref
from typing import NamedTuple

import numpy as np
import pytest

import eqxstable as es
from eqxstable import _registry


class Config(NamedTuple):
    table: np.ndarray
    name: str


@pytest.fixture(autouse=True)
def _empty_registry():
    es.clear_caches()
    yield
    es.clear_caches()


def test_a_canonical_over_the_entry_bound_is_freed_once_dropped():
    table = np.arange(_registry._MAX_ENTRY_BYTES // 8 + 1, dtype=np.float64)
    cfg = es.intern(Config(table, "run"))
    # Still a read-only copy, as for any interned array.
    assert cfg.table is not table and not cfg.table.flags.writeable
    np.testing.assert_array_equal(cfg.table, table)
    copy = weakref.ref(cfg.table)
    del cfg
    gc.collect()
    assert copy() is None
    assert _registry._strong_total == 0


def test_a_small_canonical_is_still_shared():
    a = es.intern(Config(np.arange(16.0), "run"))
    b = es.intern(Config(np.arange(16.0), "run"))
    assert a is b
    assert _registry._strong_total == 16 * 8


def test_the_table_is_bounded_by_bytes(monkeypatch):
    # Each under the entry bound, together over the table's: the oldest go first.
    size = _registry._MAX_ENTRY_BYTES // 2
    monkeypatch.setattr(_registry, "_MAX_STRONG_BYTES", 3 * size)
    copies = []
    for i in range(5):
        cfg = es.intern(Config(np.full(size // 8, float(i)), "run"))
        copies.append(weakref.ref(cfg.table))
        del cfg
    gc.collect()
    assert [c() is None for c in copies] == [True, True, False, False, False]
    assert _registry._strong_total == 3 * size
    # The newest is still canonical.
    newest = es.intern(Config(np.full(size // 8, 4.0), "run"))
    assert newest.table is copies[-1]()


def test_clearing_gives_the_bytes_back():
    cfg = es.intern((np.arange(8.0), "x"))
    assert _registry._strong_total == 64
    copy = weakref.ref(cfg[0])
    es.clear_caches()
    assert _registry._strong_total == 0 and not _registry._strong_bytes
    del cfg
    gc.collect()
    assert copy() is None
