"""A large NumPy array reached through a function (`K-array-reached`): its key holds a digest of
its bytes, not the bytes, and a new function reading the same unchanged array neither copies
nor hashes it again; any change to it is still a new key."""

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import _arrays, _bytes, compute


TABLE = np.arange(4096, dtype=np.float64)  # 32 KiB


def _reader():
    return lambda x: x * TABLE[0]


def _array_part(k):
    ((name, part),) = k.parts.globals
    assert name == "TABLE"
    return part


def test_the_key_holds_a_digest_not_the_bytes():
    part = _array_part(es.stable_key(_reader()))
    data = part.contents[3]
    assert data == ("sha256", hashlib.sha256(TABLE.tobytes()).digest())


def test_a_new_reader_of_the_same_array_copies_and_hashes_nothing(monkeypatch):
    # While a watch holds the copy (a jitted wrapper's, a cache entry's): past the last one, the
    # copy goes, and the next reader copies and hashes again (`tests/test_keys_lifetime.py`).
    _, watch = compute(_reader())
    state = _arrays._big[id(TABLE)][1]()
    assert state is not None
    calls = []
    real = hashlib.sha256

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_arrays.hashlib, "sha256", counting)
    a, b = es.stable_key(_reader()), es.stable_key(_reader())
    assert a == b and not calls
    # One watch state (one copy of the bytes) for every reader.
    assert _arrays._big[id(TABLE)][1]() is state
    del watch


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 4095), st.floats(allow_nan=False))
def test_any_change_is_a_new_key(i, value):
    a = np.arange(4096, dtype=np.float64)
    f = lambda: a[0]  # noqa: E731
    before = es.stable_key(f)
    old = a[i]
    a[i] = value
    changed = np.float64(value).tobytes() != np.float64(old).tobytes()
    assert (es.stable_key(f) != before) == changed
    a[i] = old
    assert es.stable_key(f) == before


@pytest.mark.parametrize("dtype", [np.float64, np.uint8])
@pytest.mark.parametrize("where", [0, _bytes._SLICE - 1, _bytes._SLICE, -1])
def test_a_change_in_any_slice_is_seen(dtype, where):
    # The watch compares a large array slice by slice (`_bytes.same_bytes`): by 8 bytes where
    # its size allows (float64), else byte by byte (2 * _SLICE + 3 bytes).
    a = np.zeros(2 * _bytes._SLICE + 3, dtype)
    f = lambda: a[0]  # noqa: E731
    before, watch = compute(f)
    assert watch.valid()
    a[where] = 1
    assert not watch.valid()
    assert compute(f)[0] != before
    a[where] = 0
    assert watch.valid()
