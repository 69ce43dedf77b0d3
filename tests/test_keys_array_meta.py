"""A function that reads only `.shape`/`.dtype` of a global array is keyed by those, watched,
never by a copy of the array's bytes (a dataset read for its length)."""

import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es
from eqxstable._keys import compute


DATA = np.ones(1000, np.float32)


def by_length(x):
    return x * DATA.shape[0]


def _holds_no_bytes(k):
    # No part of the key is the array's bytes.
    pending = [k.parts]
    while pending:
        p = pending.pop()
        assert not (isinstance(p, bytes) and len(p) >= DATA.nbytes)
        if isinstance(p, tuple):
            pending.extend(p)


@pytest.mark.counts_traces
def test_shape_reader():
    global DATA
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return by_length(x)

    w = es.filter_jit(f)
    one = jnp.float32(1.0)
    try:
        assert float(w(one)) == 1000.0
        DATA[0] = 5.0  # The items are not read: the same program.
        assert float(w(one)) == 1000.0
        assert traces == 1
        DATA.shape = (10, 100)
        assert float(w(one)) == 10.0
        assert traces == 2
        DATA = np.ones(7, np.float32)
        assert float(w(one)) == 7.0
        assert traces == 3
    finally:
        DATA = np.ones(1000, np.float32)


def test_key_and_watch():
    k, watch = compute(by_length)
    _holds_no_bytes(k)
    assert watch.valid()
    DATA[1] = 2.0
    assert watch.valid()
    DATA.shape = (2, 500)
    try:
        assert not watch.valid()
        assert compute(by_length)[0] != k
    finally:
        DATA.shape = (1000,)
