"""A counter is not a key, for globals too: a global that a function only bumps (`global n;
n += 1`, the docs' trace counter) leaves its key alone, while any read of its value, by the
function, a helper in its trace or another function, stays keyed by value (issue 18)."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es
from eqxstable._keys._code import global_counters


n_traces = 0
n_calls = 0
n_scaled = 0


def _first(x):
    global n_traces
    n_traces += 1
    return x + 1


def _second(x):
    global n_traces
    n_traces = n_traces + 1
    return x * 2


@pytest.mark.counts_traces
@pytest.mark.parametrize("jit", [eqx.filter_jit, es.filter_jit])
def test_two_functions_sharing_a_trace_counter(jit):
    global n_traces
    n_traces = 0
    first, second = jit(_first), jit(_second)
    for _ in range(5):
        np.testing.assert_allclose(first(jnp.ones(2)), 2.0)
        np.testing.assert_allclose(second(jnp.ones(2)), 2.0)
    assert n_traces == 2


def _reader(x):
    return x * n_calls


def _bumps_and_calls_a_reader(x):
    global n_calls
    n_calls += 1
    return _reader(x)


def _bumps_and_reads(x):
    global n_scaled
    n_scaled += 1
    return x * n_scaled


def test_what_a_counter_is():
    assert global_counters(_first.__code__) == {"n_traces"}
    assert global_counters(_second.__code__) == {"n_traces"}
    # Read otherwise: not a counter (the helper it calls is keyed on its own).
    assert global_counters(_bumps_and_reads.__code__) == frozenset()
    assert global_counters(_reader.__code__) == frozenset()
    assert global_counters(_bumps_and_calls_a_reader.__code__) == {"n_calls"}

    def by_half(x):
        global n_traces
        n_traces += 0.5  # pyright: ignore[reportConstantRedefinition]
        return x

    def assigned(x):
        global n_traces
        n_traces += 1
        n_traces = 0
        return x

    def nested(x):
        global n_traces
        n_traces += 1
        return (lambda: x * n_traces)()

    for f in (by_half, assigned, nested):
        assert global_counters(f.__code__) == frozenset()


@pytest.mark.counts_traces
def test_a_helper_in_the_trace_reads_the_counter():
    # The bumping function's key leaves the counter out, but the helper it calls reads it: the
    # helper's key (part of the caller's) is by value, so a changed count is a new trace.
    global n_calls
    n_calls = 0
    jitted = es.filter_jit(_bumps_and_calls_a_reader)
    np.testing.assert_allclose(jitted(jnp.ones(2)), 1.0)  # traced with n_calls == 1
    n_calls = 10
    np.testing.assert_allclose(jitted(jnp.ones(2)), 11.0)  # eager Python gives 11 too
    assert n_calls == 11


@pytest.mark.counts_traces
def test_another_function_reads_the_counter():
    def counted(x):
        global n_traces
        n_traces += 1
        return x - 1

    global n_traces
    n_traces = 0
    show = es.filter_jit(lambda x: x * n_traces)
    bump = es.filter_jit(counted)
    np.testing.assert_allclose(show(jnp.ones(2)), 0.0)
    bump(jnp.ones(2))
    np.testing.assert_allclose(show(jnp.ones(2)), 1.0)
    bump(jnp.ones(2))  # a hit: not traced, not counted
    np.testing.assert_allclose(show(jnp.ones(2)), 1.0)
    bump(jnp.zeros(3))  # a new shape: traced and counted
    np.testing.assert_allclose(show(jnp.ones(2)), 2.0)


@pytest.mark.counts_traces
def test_a_function_that_reads_its_counter_keys_it():
    global n_scaled
    n_scaled = 0
    jitted = es.filter_jit(_bumps_and_reads)
    np.testing.assert_allclose(jitted(jnp.ones(2)), 1.0)
    n_scaled = 5
    np.testing.assert_allclose(jitted(jnp.ones(2)), 6.0)


@pytest.mark.counts_traces
def test_a_counter_read_through_globals_is_keyed():
    def dynamic(x):
        global n_traces
        n_traces += 1
        return x * globals()["n_traces"]

    global n_traces
    n_traces = 0
    jitted = es.filter_jit(dynamic)
    np.testing.assert_allclose(jitted(jnp.ones(2)), 1.0)
    n_traces = 7
    np.testing.assert_allclose(jitted(jnp.ones(2)), 8.0)
