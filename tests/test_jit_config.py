"""JAX's configuration that a trace reads but JAX leaves out of its own cache key
(`eqxstable/_jit/_config.py`): a function rebuilt after it changed traces again, and gets the
program of the configuration it runs under."""

import contextlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es

from .helpers import enable_x64


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


@contextlib.contextmanager
def prng_impl(name: str):
    """`jax_default_prng_impl` set globally in the block, as `jax.config.update` sets it."""
    old = jax.config.jax_default_prng_impl  # pyright: ignore[reportAttributeAccessIssue]
    jax.config.update("jax_default_prng_impl", name)
    try:
        yield
    finally:
        jax.config.update("jax_default_prng_impl", old)


@pytest.mark.counts_traces
def test_rebuilt_function_after_prng_impl_changed_traces_again():
    traces = 0

    def make_f():
        def f(x):
            nonlocal traces
            traces += 1
            return x * jax.random.uniform(jax.random.key(0), ())

        return f

    x = jnp.ones(2)
    before = np.asarray(es.filter_jit(make_f())(x))
    assert traces == 1
    with prng_impl("rbg"):
        rebuilt = make_f()
        got = np.asarray(es.filter_jit(rebuilt)(x))
        assert traces == 2
        fresh = np.asarray(eqx.filter_jit(rebuilt)(x))
        assert traces == 3
    np.testing.assert_array_equal(got, fresh)
    assert not np.allclose(got, before)
    # Back under the first implementation a rebuilt function finds its program again.
    again = np.asarray(es.filter_jit(make_f())(x))
    assert traces == 3
    np.testing.assert_array_equal(again, before)


@pytest.mark.counts_traces
def test_same_wrapper_follows_prng_impl():
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x * jax.random.uniform(jax.random.key(0), ())

    g = es.filter_jit(f)
    x = jnp.ones(3)
    before = np.asarray(g(x))
    with prng_impl("rbg"):
        under_rbg = np.asarray(g(x))
        assert traces == 2
        np.testing.assert_array_equal(under_rbg, np.asarray(jax.jit(lambda x: f(x))(x)))
        np.asarray(g(x))
        assert traces == 3  # the plain `jax.jit` above traced once; `g` hit
    assert not np.allclose(under_rbg, before)
    np.testing.assert_array_equal(np.asarray(g(x)), before)
    assert traces == 3
    assert g.cache_info().traces == 2


@pytest.mark.counts_traces
def test_reuse_across_functions_keeps_prng_impls_apart():
    # Two different functions with equal traces share a program only under one implementation.
    x = jnp.ones(2)
    a = np.asarray(es.filter_jit(lambda x: x * jax.random.uniform(jax.random.key(0), ()))(x))
    with prng_impl("rbg"):
        b = np.asarray(es.filter_jit(lambda x: x * jax.random.uniform(jax.random.key(0), ()))(x))
        want = np.asarray(jax.jit(lambda x: x * jax.random.uniform(jax.random.key(0), ()))(x))
    np.testing.assert_array_equal(b, want)
    assert not np.allclose(a, b)


@pytest.mark.counts_traces
def test_an_x64_toggle_is_a_configuration_change_not_a_dtype_change():
    # Attack 9b-03: the very same float64 NumPy array, read as float32 without x64 and float64
    # with it, was reported as `args[0]` changing dtype, with "cast it to one dtype" advice
    # that no cast can follow.
    f = es.filter_jit(lambda x: x * 2)
    x = np.ones(3)
    assert f(x).dtype == jnp.float32
    with enable_x64(True):
        assert f(x).dtype == jnp.float64
    miss = f.misses[1]
    # Named `jax_enable_x64` where JAX names its trace context (JAX 0.5 does not: `#5`).
    assert miss.kind == "first" and "JAX configuration (`" in miss.reason
    assert "` False -> True" in miss.reason
    assert "float32[3] -> float64[3]" in miss.reason and "cast" not in miss.reason
    # A dtype that changed under one configuration is still the argument's.
    f(x.astype(np.int32))
    assert f.misses[2].kind == "dtype" and "cast it to one dtype" in f.misses[2].reason
