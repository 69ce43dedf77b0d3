"""A log or a counter in a closure cell is not a key: two jitted closures that share a trace log
(`log.append("f")`) or a `nonlocal` trace counter (`n += 1` in both) do not invalidate each
other on every trace (attack round 11a, finding 07; `K-trace-log`, `K-counter-cell`), while any
read of the list or the count, by the function, a helper, `locals()` or another function's
`__closure__`, stays keyed by contents and gives the eager answer."""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys._cells import counter_cells, log_cells


def _logging_pair() -> tuple[Any, Any, list]:
    log: list = []

    def first(x):
        log.append("first")
        return x + 1

    def second(x):
        log.append(("second", x.shape))
        # A function made in the trace that shares the cell and only appends too.
        (lambda: log.append("inner"))()
        return x * 2

    return first, second, log


def _counting_pair() -> tuple[Any, Any, Any]:
    n = 0

    def first(x):
        nonlocal n
        n += 1
        return x + 1

    def second(x):
        nonlocal n
        n += 1
        return x * 2

    return first, second, lambda: n


def _reading_pair() -> tuple[Any, Any, list]:
    log: list = [1]

    def appends(x):
        log.append(2)
        return x

    def reads_length(x):
        log.append(0)
        return x * len(log)

    return appends, reads_length, log


def test_what_a_log_cell_is():
    first, second, _ = _logging_pair()
    assert log_cells(first, False) == (True,)
    assert log_cells(second, False) == (True,)
    appends, reads_length, _ = _reading_pair()
    assert log_cells(appends, False) == (True,)
    assert log_cells(reads_length, False) == (False,)
    a, b, read = _counting_pair()
    assert counter_cells(a, False) == counter_cells(b, False) == (True,)
    assert counter_cells(read, False) == (False,)


@pytest.mark.counts_traces
@pytest.mark.parametrize("jit", [eqx.filter_jit, es.filter_jit])
def test_two_closures_sharing_a_trace_log(jit):
    first, second, log = _logging_pair()
    f, g = jit(first), jit(second)
    for _ in range(10):
        np.testing.assert_allclose(f(jnp.ones(2)), 2.0)
        np.testing.assert_allclose(g(jnp.ones(2)), 2.0)
    assert log == ["first", ("second", (2,)), "inner"]


@pytest.mark.counts_traces
@pytest.mark.parametrize("jit", [eqx.filter_jit, es.filter_jit])
def test_two_closures_sharing_a_nonlocal_counter(jit):
    first, second, count = _counting_pair()
    f, g = jit(first), jit(second)
    for _ in range(10):
        np.testing.assert_allclose(f(jnp.ones(2)), 2.0)
        np.testing.assert_allclose(g(jnp.ones(2)), 2.0)
    assert count() == 2


@pytest.mark.counts_traces
@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=4))
def test_a_closure_reading_the_log_sees_it_change(extra):
    appends, reads_length, log = _reading_pair()
    a, r = es.filter_jit(appends), es.filter_jit(reads_length)
    x = jnp.ones(2)
    for k in extra:
        a(x)
        log.extend([9] * k)
        # `reads_length` appends, then reads the length; eager on a copy gives the answer.
        expected = len(log) + 1
        np.testing.assert_allclose(r(x), float(expected))
        del log[-1]


def _closure_readers() -> tuple[Any, list[Any], list]:
    log: list = [1]

    def appends(x):
        log.append(2)
        return x

    def through_closure():
        return lambda x: x * len(appends.__closure__[0].cell_contents)  # pyright: ignore

    def through_locals():
        def reader(x):
            # Appends only, by name; reads the list through `locals()`.
            log.append(None)
            return x * sum(v is not None for v in locals()["log"])

        return reader

    return appends, [through_closure, through_locals], log


@pytest.mark.counts_traces
@pytest.mark.parametrize("which", [0, 1])
def test_other_ways_to_read_a_log_cell_are_keyed(which):
    # A reader rebuilt at each step (the very same function object is a constant, as under
    # `equinox.filter_jit`): what it reads is keyed (a function naming `__closure__` is a key
    # equal to nothing when reached), never served the program of the log as it was.
    appends, makers, log = _closure_readers()
    run = es.filter_jit(lambda fn, x: fn(x))
    x = jnp.ones(2)
    np.testing.assert_allclose(run(makers[which](), x), makers[which]()(x))
    appends(x)
    log.extend([3, 4])
    np.testing.assert_allclose(run(makers[which](), x), makers[which]()(x))
    assert float(run(makers[which](), x)[0]) == sum(v is not None for v in log) == 4


@pytest.mark.counts_traces
def test_a_log_cell_rebound_to_something_else_is_keyed_as_read():
    class Log:
        scale = 2.0

        def append(self, item):
            pass

    def make() -> tuple[Any, Any]:
        log: Any = []

        def appends(x):
            log.append(1)
            return x * getattr(log, "scale", 1.0)  # Reads the log: not a log cell.

        def only_appends(x):
            log.append(1)
            return x

        def rebind(new):
            nonlocal log
            log = new

        return appends, (only_appends, rebind)

    _, (only_appends, rebind) = make()
    f = es.filter_jit(only_appends)
    np.testing.assert_allclose(f(jnp.ones(2)), 1.0)
    rebind(Log())
    np.testing.assert_allclose(f(jnp.ones(2)), 1.0)
    assert f.cache_info().misses == 2  # The cell changed: keyed again, as what it holds now.
