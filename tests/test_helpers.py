"""The test helpers are witnesses for every other test, so they are tested first: against plain
`equinox.filter_jit`, whose caching behaviour is known."""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .helpers import compile_log, CompileLog, count_traces


def test_count_traces_counts_traces_not_calls():
    def add_one(x):
        return x + 1

    counter = count_traces(add_one)
    jitted = eqx.filter_jit(counter)
    jitted(jnp.ones(3))
    jitted(jnp.ones(3))
    assert counter.count == 1
    jitted(jnp.ones(4))
    assert counter.count == 2
    assert counter.__name__ == "add_one"


def test_count_traces_by_hand():
    # The pattern to copy when the counted function must itself stay a plain function, e.g. when
    # it is passed as a static argument: a `nonlocal` counter in a function defined once.
    num_traces = 0

    @eqx.filter_jit
    def f(x, flag):
        nonlocal num_traces
        num_traces += 1
        return x + 1 if flag else x - 1

    f(jnp.ones(2), True)
    f(jnp.ones(2), True)
    assert num_traces == 1
    f(jnp.ones(2), False)
    assert num_traces == 2


def test_compile_log_names_compiled_functions():
    @eqx.filter_jit
    def double_it(x):
        return 2 * x

    with compile_log() as log:
        double_it(jnp.ones(3))
        double_it(jnp.ones(3))
        assert log.count("double_it") == 1
        double_it(jnp.ones(5))
    assert log.count("double_it") == 2
    assert log.traced.count("double_it") == 2
    assert "double_it" in log.compiled


def test_compile_log_agrees_with_trace_counter():
    def scale(x, factor):
        return factor * x

    counter = count_traces(scale)
    jitted = eqx.filter_jit(counter)
    with compile_log() as log:
        for factor in [1.0, 2.0, 1.0, 2.0, 3.0]:
            jitted(jnp.ones(2), factor)
    assert counter.count == log.count("scale") == 3


def test_compile_log_is_empty_outside_the_block():
    @eqx.filter_jit
    def outside(x):
        return x - 1

    with compile_log() as log:
        pass
    outside(jnp.ones(3))
    assert log.compiled == [] and log.traced == []


def test_compiles_fixture(compiles: CompileLog):
    @eqx.filter_jit
    def in_fixture(x):
        return x * x

    in_fixture(jnp.ones(3))
    in_fixture(jnp.ones(3))
    assert compiles.count("in_fixture") == 1


def test_getkey_fixture_gives_fresh_keys(getkey):
    first, second = jr.key_data(getkey()), jr.key_data(getkey())
    assert not jnp.array_equal(first, second)
