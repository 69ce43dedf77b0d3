"""A static object changed in place after it was used is never served the stale program: the call
retraces with a miss of kind "mutated" that names it."""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es

from .helpers import count_traces


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


class _Config:
    def __init__(self, scale):
        self.scale = scale


def _by_config(x, config):
    return x * config.scale


def _by_activation(x, activation):
    return activation(x)


@pytest.mark.counts_traces
def test_mutated_attribute_retraces():
    counter = count_traces(_by_config)
    jitted = es.filter_jit(counter)
    config = _Config(2.0)
    np.testing.assert_allclose(jitted(jnp.ones(2), config), 2.0)
    np.testing.assert_allclose(jitted(jnp.ones(2), config), 2.0)
    config.scale = 3.0
    np.testing.assert_allclose(jitted(jnp.ones(2), config), 3.0)
    np.testing.assert_allclose(jitted(jnp.ones(2), config), 3.0)
    assert counter.count == 2
    miss = jitted.misses[-1]
    assert (miss.kind, miss.path) == ("mutated", "args[1]")
    assert "changed in place" in miss.reason


def test_equinox_serves_the_stale_program():
    # The bug this guards against, as plain `eqx.filter_jit` shows it.
    jitted = eqx.filter_jit(_by_config)
    config = _Config(2.0)
    jitted(jnp.ones(2), config)
    config.scale = 3.0
    np.testing.assert_allclose(jitted(jnp.ones(2), config), 2.0)


@pytest.mark.counts_traces
def test_mutated_captured_list_retraces():
    scales = [2.0]
    activation = lambda v: v * scales[0]  # noqa: E731
    counter = count_traces(_by_activation)
    jitted = es.filter_jit(counter)
    np.testing.assert_allclose(jitted(jnp.ones(2), activation), 2.0)
    np.testing.assert_allclose(jitted(jnp.ones(2), activation), 2.0)
    assert counter.count == 1
    scales[0] = 5.0
    np.testing.assert_allclose(jitted(jnp.ones(2), activation), 5.0)
    assert jitted.misses[-1].kind == "mutated"
    # A longer list is a change too, even with the first item as it was.
    scales.append(1.0)
    scales[0] = 5.0
    np.testing.assert_allclose(jitted(jnp.ones(2), activation), 5.0)
    assert counter.count == 3


@pytest.mark.counts_traces
def test_rebound_closure_cell_retraces():
    scale = 2.0

    def activation(v):
        return v * scale

    counter = count_traces(_by_activation)
    jitted = es.filter_jit(counter)
    np.testing.assert_allclose(jitted(jnp.ones(2), activation), 2.0)
    scale = 4.0
    np.testing.assert_allclose(jitted(jnp.ones(2), activation), 4.0)
    assert counter.count == 2
    # Rebinding it back serves the first program again, without a trace.
    scale = 2.0  # noqa: F841
    np.testing.assert_allclose(jitted(jnp.ones(2), activation), 2.0)
    assert counter.count == 2
    assert [m.kind for m in jitted.misses] == ["first", "mutated"]
    assert jitted.cache_info()[:2] == (1, 2)


_GLOBAL_SCALE = 2.0


def _reads_global(v):
    return v * _GLOBAL_SCALE


def test_rebound_global_retraces():
    global _GLOBAL_SCALE
    jitted = es.filter_jit(_by_activation)
    np.testing.assert_allclose(jitted(jnp.ones(2), _reads_global), 2.0)
    _GLOBAL_SCALE = 3.0
    try:
        np.testing.assert_allclose(jitted(jnp.ones(2), _reads_global), 3.0)
    finally:
        _GLOBAL_SCALE = 2.0
    assert jitted.misses[-1].kind == "mutated"
    assert "_GLOBAL_SCALE" in jitted.misses[-1].reason


class _Holder(eqx.Module):
    config: Any = eqx.field(static=True)


def test_mutated_object_in_a_static_field_retraces():
    jitted = es.filter_jit(lambda h, x: x * h.config.scale)
    config = _Config(2.0)
    np.testing.assert_allclose(jitted(_Holder(config), jnp.ones(2)), 2.0)
    config.scale = 7.0
    np.testing.assert_allclose(jitted(_Holder(config), jnp.ones(2)), 7.0)
    assert jitted.misses[-1].kind == "mutated"


def test_mutation_inside_an_object_reached_through_a_tuple():
    # The fast per-call check must see changes two levels down, not only the static itself.
    inner = _Config(2.0)
    outer = _Config((inner, "label"))
    jitted = es.filter_jit(lambda x, c: x * c.scale[0].scale)
    np.testing.assert_allclose(jitted(jnp.ones(2), outer), 2.0)
    inner.scale = 6.0
    np.testing.assert_allclose(jitted(jnp.ones(2), outer), 6.0)
    assert jitted.misses[-1].kind == "mutated"


@pytest.mark.counts_traces
def test_unchanged_statics_keep_hitting():
    counter = count_traces(_by_config)
    jitted = es.filter_jit(counter)
    config = _Config(2.0)
    for _ in range(5):
        jitted(jnp.ones(2), config)
    config.scale = 2.0  # the same object assigned again: nothing changed
    jitted(jnp.ones(2), config)
    assert counter.count == 1


#
# The jitted function itself is a static object too.
#


def _rebindable():
    scale = 1.0
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x * scale

    def rebind(value):
        nonlocal scale
        scale = value

    return f, rebind, lambda: traces


def test_wrappers_sharing_a_program_each_run_their_own_function():
    # Equivalent at wrap time, so they share a program; then one's closure cell is rebound.
    f1, _, _ = _rebindable()
    f2, rebind2, _ = _rebindable()
    jitted1, jitted2 = es.filter_jit(f1), es.filter_jit(f2)
    rebind2(5.0)
    np.testing.assert_allclose(jitted2(jnp.ones(1)), 5.0)
    np.testing.assert_allclose(jitted1(jnp.ones(1)), 1.0)
    np.testing.assert_allclose(jitted2(jnp.ones(1)), 5.0)


@pytest.mark.counts_traces
def test_rebound_cell_of_the_jitted_function_retraces():
    f, rebind, traces = _rebindable()
    jitted = es.filter_jit(f)
    x = jnp.ones(2)
    for _ in range(3):
        np.testing.assert_allclose(jitted(x), 1.0)
    # The trace counter in `f` changed `f`'s own cell while it was traced: not a mutation.
    assert traces() == 1
    rebind(4.0)
    np.testing.assert_allclose(jitted(x), 4.0)
    np.testing.assert_allclose(jitted(x), 4.0)
    assert traces() == 2
    assert [m.kind for m in jitted.misses] == ["first", "mutated"]
    assert jitted.misses[-1].path == "f"
    assert "rebound after it was used" in jitted.misses[-1].reason
    assert jitted.cache_info()[:2] == (3, 2)


SCALE = 2.0


def _reads_scale(x):
    return x * SCALE


def test_rebound_global_of_the_jitted_function_retraces():
    global SCALE
    jitted = es.filter_jit(_reads_scale)
    np.testing.assert_allclose(jitted(jnp.ones(1)), 2.0)
    old = SCALE
    SCALE = 3.0
    try:
        np.testing.assert_allclose(jitted(jnp.ones(1)), 3.0)
    finally:
        SCALE = old
    assert "the global `SCALE`" in jitted.misses[-1].reason
    np.testing.assert_allclose(jitted(jnp.ones(1)), 2.0)


@pytest.mark.counts_traces
def test_static_callable_with_a_trace_counter_is_not_mutated():
    calls = 0

    def activation(x):
        nonlocal calls
        calls += 1
        return x * 2

    jitted = es.filter_jit(_by_activation)
    for _ in range(4):
        np.testing.assert_allclose(jitted(jnp.ones(1), activation), 2.0)
    assert calls == 1
    assert jitted.cache_info()[:2] == (3, 1)


def _plain_factory():
    # A fresh plain function (no closure, keyword defaults or attributes) per test, so that a
    # change made to it cannot leak into another test.
    def scaled(x, scale=2.0):
        return x * scale

    return scaled


def _times_ten(x, scale=2.0):
    return x * 10.0


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda f: setattr(f, "__defaults__", (5.0,)), 5.0),
        (lambda f: setattr(f, "__code__", _times_ten.__code__), 10.0),
        (lambda f: setattr(f, "note", "an attribute the trace could read"), 2.0),
        (lambda f: setattr(f, "__kwdefaults__", {"unused": 3.0}), 2.0),
    ],
    ids=["defaults rebound", "code replaced", "attribute added", "keyword defaults set"],
)
def test_plain_jitted_function_changed_in_place_retraces(change, expected):
    # The jitted function has no closure, keyword defaults or attributes: its watch is the
    # inline check of `Watch.valid`, which must see each of these changes.
    f = _plain_factory()
    assert f.__closure__ is None and f.__kwdefaults__ is None and not f.__dict__
    jitted = es.filter_jit(f)
    x = jnp.ones(2)
    np.testing.assert_allclose(jitted(x), 2.0)
    np.testing.assert_allclose(jitted(x), 2.0)
    change(f)
    np.testing.assert_allclose(jitted(x), expected)
    np.testing.assert_allclose(jitted(x), expected)
    assert [m.kind for m in jitted.misses] == ["first", "mutated"]
    assert "rebound after it was used" in jitted.misses[-1].reason
    assert jitted.cache_info()[:2] == (2, 2)


def test_plain_jitted_function_changed_to_an_equal_key_keeps_its_program():
    # Empty keyword defaults where there were none: the inline check fails, the key is computed
    # again, and it is the same key, so the program is kept.
    f = _plain_factory()
    jitted = es.filter_jit(f)
    x = jnp.ones(2)
    np.testing.assert_allclose(jitted(x), 2.0)
    f.__kwdefaults__ = {}
    np.testing.assert_allclose(jitted(x), 2.0)
    assert [m.kind for m in jitted.misses] == ["first"]
    assert jitted.cache_info()[:2] == (1, 1)
