"""A function that reads a namespace whole, through a function's `__globals__` or a frame's
`f_globals`/`f_locals` (attack 6, finding 04), may read any name there, and from whose namespace
the bytecode does not show: it is identity-keyed, and a function calling it never shares a key.
A rebuilt one traces again and reads the value as it is now, as under `equinox.filter_jit`."""

import inspect
import operator
import sys

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


_SCALE = 1.0
_scales = st.lists(st.floats(-4, 4, allow_nan=False, width=32), min_size=1, max_size=3)


def _helper(x):
    return x * _helper.__globals__["_SCALE"]


def _makers(count):
    """Rebuilt functions that read `_SCALE` through a namespace, each in another way."""

    def function_globals():
        def loss(x):
            count()
            return x * loss.__globals__["_SCALE"]

        return loss

    def getattr_globals():
        def loss(x):
            count()
            return x * getattr(loss, "__globals__")["_SCALE"]

        return loss

    def attrgetter_globals():
        def loss(x):
            count()
            return x * operator.attrgetter("__globals__")(loss)["_SCALE"]

        return loss

    def frame_globals():
        def loss(x):
            count()
            return x * inspect.currentframe().f_globals["_SCALE"]  # pyright: ignore

        return loss

    def sys_frame_globals():
        def loss(x):
            count()
            return x * sys._getframe().f_globals["_SCALE"]

        return loss

    def through_a_helper():
        def loss(x):
            count()
            return _helper(x)

        return loss

    return [
        function_globals,
        getattr_globals,
        attrgetter_globals,
        frame_globals,
        sys_frame_globals,
        through_a_helper,
    ]


_NAMES = [m.__name__ for m in _makers(None)]


def _counted(name: str):
    traces = 0

    def count():
        nonlocal traces
        traces += 1

    make = next(m for m in _makers(count) if m.__name__ == name)
    return make, lambda: traces


@pytest.mark.counts_traces
@pytest.mark.parametrize("name", _NAMES)
@settings(max_examples=8, deadline=None)
@given(scales=_scales)
def test_a_rebuilt_namespace_reader_reads_the_value_as_it_is_now(name, scales):
    global _SCALE
    make, traces = _counted(name)
    x = jnp.ones(2)
    try:
        for i, s in enumerate(scales):
            _SCALE = s
            f = make()
            expected = np.asarray(f(x))
            assert np.array_equal(np.asarray(eqx.filter_jit(f)(x)), expected)
            assert np.array_equal(np.asarray(es.filter_jit(make())(x)), expected)
        # Each call: eager, Equinox, eqxstable (a rebuilt reader always traces, as in Equinox).
        assert traces() == 3 * len(scales)
    finally:
        _SCALE = 1.0


@pytest.mark.counts_traces
@pytest.mark.parametrize("name", _NAMES)
def test_the_same_reader_hits_and_is_never_shared_or_substituted(name):
    make, traces = _counted(name)
    a, b = make(), make()
    same = es.filter_jit(a)
    x = jnp.ones(2)
    assert float(same(x)[0]) == float(same(x)[0]) == _SCALE
    assert traces() == 1
    assert es.stable_key(a) != es.stable_key(b)
    assert es.intern(a) is a and es.intern(b) is b
