"""A log is not a key: a global list that functions only append to (`TRACE_LOG.append("f")`,
a trace log shared by several jitted functions) leaves their keys alone, so they do not
invalidate each other on every trace (attack round 10b, finding 02), while any read of the
list's contents, by the function, a helper in its trace or another function, stays keyed by
contents and watched (`K-trace-log`)."""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es
from eqxstable._keys._code import appended_only


TRACE_LOG: list = []
READ_LOG: list = []
OTHER: Any = []


def _first(x):
    TRACE_LOG.append("first")
    return x + 1


def _second(x):
    TRACE_LOG.append(("second", x.shape))
    return x * 2


def _appends_read(x):
    READ_LOG.append("appends")
    return x


def _reads_length(x):
    return x * len(READ_LOG)


def _reads_last(x):
    return x * READ_LOG[-1]


def _through_the_bound_method(x):
    # `append` not called at once: the list is reachable (`__self__`) and read.
    return x * READ_LOG.append.__self__[-1]


def _other(x):
    OTHER.append(1)
    return x * OTHER.scale


def test_what_a_log_is():
    assert appended_only(_first.__code__) == {"TRACE_LOG"}
    assert appended_only(_second.__code__) == {"TRACE_LOG"}
    assert appended_only(_reads_length.__code__) == frozenset()
    assert appended_only(_reads_last.__code__) == frozenset()
    assert appended_only(_through_the_bound_method.__code__) == frozenset()
    assert appended_only(_other.__code__) == frozenset()


@pytest.mark.counts_traces
@pytest.mark.parametrize("jit", [eqx.filter_jit, es.filter_jit])
def test_two_functions_sharing_a_trace_log(jit):
    TRACE_LOG.clear()
    first, second = jit(_first), jit(_second)
    for _ in range(10):
        np.testing.assert_allclose(first(jnp.ones(2)), 2.0)
        np.testing.assert_allclose(second(jnp.ones(2)), 2.0)
    assert TRACE_LOG == ["first", ("second", (2,))]


@pytest.mark.counts_traces
@pytest.mark.parametrize("reader", [_reads_length, _reads_last, _through_the_bound_method])
def test_a_function_reading_the_log_sees_it_change(reader):
    READ_LOG[:] = [1]
    appends = es.filter_jit(_appends_read)
    read = es.filter_jit(reader)
    x = jnp.ones(2)
    np.testing.assert_allclose(read(x), reader(x))
    appends(x)  # Traced: appends "appends"; then a number again, so `READ_LOG[-1]` computes.
    READ_LOG.append(3)
    np.testing.assert_allclose(read(x), reader(x))
    # `[1, "appends", 3]`: three items, the last 3; the eager answer reads the list as it is now.
    assert float(reader(x)[0]) == 3.0
    READ_LOG.append(5)
    np.testing.assert_allclose(read(x), reader(x))


@pytest.mark.counts_traces
def test_a_log_rebound_to_something_else_is_keyed_as_read():
    global OTHER

    class Log:
        scale = 2.0

        def append(self, item):
            pass

    OTHER = []
    appends = es.filter_jit(lambda x: (OTHER.append(1), x)[1])
    np.testing.assert_allclose(appends(jnp.ones(2)), 1.0)
    OTHER = Log()
    f = es.filter_jit(_other)
    np.testing.assert_allclose(f(jnp.ones(2)), 2.0)
    Log.scale = 3.0
    np.testing.assert_allclose(f(jnp.ones(2)), 3.0)
