"""`K-module-attrs`: a library's data object read from its module (`logging.root`) is keyed one
level deep only where that is all a reader can reach: an object holding another object
(`logging.root.manager.disable`) gives its reader a key equal to nothing, so a rebuilt reader
traces again and sees the data as it is now. `jax.config` keeps its key one level deep
(what a trace reads from it JAX's trace context and `_jit/_config.py` key)."""

import logging

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


@pytest.mark.counts_traces
def test_rebuilt_reader_of_library_data_two_attributes_deep_traces_again():
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * (logging.root.manager.disable + 1)

        return f

    x = jnp.ones(2)
    try:
        before = np.asarray(es.filter_jit(make())(x))
        assert traces == 1
        logging.disable(49)
        rebuilt = make()
        got = np.asarray(es.filter_jit(rebuilt)(x))
        assert traces == 2
        np.testing.assert_array_equal(got, np.asarray(eqx.filter_jit(rebuilt)(x)))
    finally:
        logging.disable(logging.NOTSET)
    np.testing.assert_array_equal(before, [1.0, 1.0])
    np.testing.assert_array_equal(got, [50.0, 50.0])


def test_library_object_holding_objects_is_keyed_by_nothing():
    def make():
        return lambda x: x * logging.root.manager.disable

    assert es.stable_key(make()) != es.stable_key(make())
    assert es.intern(make()) is not es.intern(make())


def test_jax_config_reads_still_share():
    def make():
        return lambda x: x * (2 if jax.config.jax_enable_x64 else 1)  # pyright: ignore[reportAttributeAccessIssue]

    assert es.stable_key(make()) == es.stable_key(make())
    assert es.intern(make()) is es.intern(make())
