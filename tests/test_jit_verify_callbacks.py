"""Verify mode and callbacks (attack 14b-02, open, documented in `docs/assumptions.md`): a
callback closing over an object the trace makes afresh is a new object on every trace, so verify
mode raises `es.StaleProgramError` on a right hit. Normal mode serves the hit, as
`equinox.filter_jit` does; an object made outside the function verifies clean."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es


def _scaled_by_a_fresh_array(x):
    scale = np.array(2.0)  # made afresh by every trace

    def cb(v):
        return (np.asarray(v) * scale).astype(np.float32)

    return jax.pure_callback(cb, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def _logs_to_a_fresh_list(x):
    calls = []
    jax.debug.callback(lambda v: calls.append(v), x)
    return x + 1


_SCALE = np.array(2.0)


def _scaled_by_a_global_array(x):
    def cb(v):
        return (np.asarray(v) * _SCALE).astype(np.float32)

    return jax.pure_callback(cb, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


FRESH = [_scaled_by_a_fresh_array, _logs_to_a_fresh_list]


@pytest.mark.parametrize("fn", FRESH)
def test_normal_mode_serves_the_hit_with_the_right_values(fn):
    f = es.filter_jit(fn, verify=False)
    x = jnp.ones(2, jnp.float32)
    first, second = f(x), f(x)
    assert second.tolist() == first.tolist() == [2.0, 2.0]
    assert second.tolist() == eqx_result(fn, x)


@pytest.mark.parametrize("fn", FRESH)
@pytest.mark.xfail(strict=True, raises=es.StaleProgramError, reason="14b-02: a false alarm")
def test_verify_takes_a_callback_over_a_trace_made_object_for_stale(fn):
    f = es.filter_jit(fn, verify=True)
    x = jnp.ones(2, jnp.float32)
    f(x)
    assert f(x).tolist() == [2.0, 2.0]


def test_an_object_made_outside_verifies_clean_and_a_change_to_it_is_run():
    f = es.filter_jit(_scaled_by_a_global_array, verify=True)
    x = jnp.ones(2, jnp.float32)
    assert f(x).tolist() == [2.0, 2.0]
    assert f(x).tolist() == [2.0, 2.0]  # A hit, verified.
    _SCALE[...] = 3.0  # The callback reads it when the program runs.
    try:
        assert f(x).tolist() == [3.0, 3.0] == eqx_result(_scaled_by_a_global_array, x)
    finally:
        _SCALE[...] = 2.0


def eqx_result(fn, x):
    return eqx.filter_jit(fn)(x).tolist()
