"""A function reading JAX's configuration at trace time (`jax.config.jax_enable_checks`) is keyed
by every flag's value (`K-module-attrs`, attack 11c-06): JAX's trace context holds only some of
them, so a program traced under the old value of another must not serve a rebuilt function (or
the same one) after `jax.config.update`. Compared with a fresh trace of `equinox.filter_jit`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st
from jax import config as aliased_config

import eqxstable as es


# Boolean flags outside JAX's trace context, which JAX does not key its caches by.
FLAGS = ("jax_enable_checks", "jax_debug_infs")

READERS = {
    "attribute": lambda flag: lambda x: x * 2.0 if getattr(jax.config, flag) else x,
    "chain": lambda flag: (
        (lambda x: x * 2.0 if jax.config.jax_enable_checks else x)  # pyright: ignore
        if flag == "jax_enable_checks"
        else (lambda x: x * 2.0 if jax.config.jax_debug_infs else x)  # pyright: ignore
    ),
    "alias": lambda flag: lambda x: x * 2.0 if getattr(aliased_config, flag) else x,
    "values": lambda flag: lambda x: x * 2.0 if jax.config.values[flag] else x,
}


def _run(x, fn):
    return fn(x)


@settings(max_examples=12, deadline=None)
@given(flag=st.sampled_from(FLAGS), reader=st.sampled_from(sorted(READERS)))
def test_a_flag_read_at_trace_time_is_keyed(flag, reader):
    make = READERS[reader]
    x = jnp.ones(2)
    same = es.filter_jit(make(flag))
    assert float(es.filter_jit(_run)(x, make(flag))[0]) == 1.0
    assert float(same(x)[0]) == 1.0
    jax.config.update(flag, True)
    try:
        want = float(eqx.filter_jit(_run)(x, make(flag))[0])
        assert want == 2.0
        assert float(es.filter_jit(_run)(x, make(flag))[0]) == want
        assert float(same(x)[0]) == want
    finally:
        jax.config.update(flag, False)
    assert float(same(x)[0]) == 1.0


@pytest.mark.counts_traces
def test_a_function_reading_the_configuration_still_hits():
    traces = 0

    @es.filter_jit
    def f(x):
        nonlocal traces
        traces += 1
        return x * 2.0 if jax.config.jax_enable_checks else x  # pyright: ignore

    for _ in range(4):
        assert float(f(jnp.ones(2))[0]) == 1.0
    assert traces == 1
