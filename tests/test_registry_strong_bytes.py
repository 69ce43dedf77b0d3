"""The registry's table of canonicals held strongly (tuples, NamedTuples: no weak reference)
keeps no arrays (attack round 9a, finding 10: an interned rebuilt `Config(table, name)` kept its
table's read-only copy after the program dropped every reference). Since attack round 11c,
finding 03, a tuple holding an array is never substituted at all: it is the user's own, held by
no table, freed with its last reference."""

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


@pytest.mark.parametrize("size", [16, _registry._MAX_ENTRY_BYTES // 8 + 1])
def test_a_config_holding_an_array_is_itself_and_freed_once_dropped(size):
    table = np.arange(size, dtype=np.float64)
    cfg = Config(table, "run")
    assert es.intern(cfg) is cfg
    assert es.intern(Config(np.arange(size, dtype=np.float64), "run")) is not cfg
    held = weakref.ref(table)
    del cfg, table
    gc.collect()
    assert held() is None
    assert _registry._strong_total == 0 and not _registry._strong_bytes


def test_a_config_without_arrays_is_still_shared():
    a = es.intern(Config((1.0, 2.0), "run"))  # pyright: ignore[reportArgumentType]
    b = es.intern(Config((1.0, 2.0), "run"))  # pyright: ignore[reportArgumentType]
    assert a is b
    assert _registry._strong_total == 0
