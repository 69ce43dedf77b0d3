"""A `nonlocal` trace counter in a function defined inside a Hypothesis `@given` test is a counter
(`_keys/_cells.py`): the keys find the enclosing code by its qualified name, and the module holds
Hypothesis's generated function under the test's name, whose closure holds a wrapper that finds
the test as `.hypothesis.inner_test`, never as `__wrapped__` (a decorator written without
`functools.wraps` holds it in its closure). Not found, the counter's cell was keyed by its
contents, so each fresh closure after a trace was a new key: one trace per call."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys._cells import counter_cells


@pytest.mark.counts_traces
@settings(max_examples=3)
@given(st.sampled_from([0.5, 2.0, 3.0]))
def test_a_nonlocal_counter_inside_given_does_not_retrace(scale):
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * scale

        return f

    f = make()
    assert dict(zip(f.__code__.co_freevars, counter_cells(f, False))) == {
        "scale": False,
        "traces": True,
    }
    run = es.filter_jit(lambda fn, x: fn(x))
    x = jnp.ones(2)
    for _ in range(3):
        np.testing.assert_allclose(run(make(), x), x * scale)
    assert traces == 1, run.explain()
    assert run.cache_info().misses == 1


@pytest.mark.counts_traces
@settings(max_examples=2)
@given(st.just(2.0))
def test_a_nonlocal_read_into_the_output_inside_given_still_retraces(scale):
    # Not a counter: the traced computation reads it, so each value is another program.
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * scale * traces

        return f

    run = es.filter_jit(lambda fn, x: fn(x))
    x = jnp.ones(2)
    for n in (1, 2, 3):
        np.testing.assert_allclose(run(make(), x), x * scale * n)
    assert traces == 3


def _without_wraps(fn):
    # A decorator that keeps the function in its closure and sets no `__wrapped__`.
    def wrapper(*args):
        return fn(*args)

    return wrapper


@_without_wraps
def _count_traces(scale):
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * scale

        return f

    run = es.filter_jit(lambda fn, x: fn(x))
    x = jnp.ones(2)
    for _ in range(3):
        np.testing.assert_allclose(run(make(), x), x * scale)
    return traces


@pytest.mark.counts_traces
def test_a_nonlocal_counter_inside_a_decorator_without_wraps_does_not_retrace():
    assert not hasattr(_count_traces, "__wrapped__")
    assert _count_traces(2.0) == 1
