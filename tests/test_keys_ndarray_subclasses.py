"""An `np.ndarray` subclass reached by a function (`np.memmap`, a masked array, a user's) is
itself and what it holds, watched: writing into it, or changing a mask, is a new key."""

import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es


class Sub(np.ndarray):
    pass


def _count(fn):
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return fn(x)

    return es.filter_jit(f), lambda: traces


@pytest.mark.counts_traces
def test_user_subclass_and_memmap_written(tmp_path):
    sub = np.array([2.0], np.float32).view(Sub)
    mm = np.memmap(tmp_path / "m.dat", np.float32, "w+", shape=(1,))
    mm[0] = 2.0
    for arr in (sub, mm):
        w, traces = _count(lambda x, arr=arr: x * jnp.asarray(np.asarray(arr)))
        one = jnp.float32(1.0)
        assert float(w(one)[0]) == 2.0
        arr[0] = 3.0
        assert float(w(one)[0]) == 3.0
        assert float(w(one)[0]) == 3.0
        assert traces() == 2
    del mm


@pytest.mark.counts_traces
def test_masked_array_mask():
    ma = np.ma.masked_array([2.0], mask=[False])
    w, traces = _count(lambda x: x * jnp.asarray(ma.filled(0.0)))
    one = jnp.float32(1.0)
    assert float(w(one)[0]) == 2.0
    ma.mask = [True]
    assert float(w(one)[0]) == 0.0
    assert traces() == 2


def test_never_substituted():
    a = np.array([1.0]).view(Sub)
    b = np.array([1.0]).view(Sub)
    assert es.stable_key(a) != es.stable_key(b)
    assert es.intern(b) is b
    before = es.stable_key(a)
    a.scale = 2.0  # pyright: ignore
    assert es.stable_key(a) != before
