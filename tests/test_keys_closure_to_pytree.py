"""`K-closure-function`: Equinox's closures as pytrees (`equinox.internal.closure_to_pytree`, which
optimistix applies to optax's optimisers). A `_Closure` rebuilt with a new learning-rate array is
one trace, as under `equinox.filter_jit`; two that differ in code, a default, a keyword default or
a global they read are two, each with its own output."""

import types
from typing import Any

import equinox as eqx
import equinox.internal as eqxi
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es
from eqxstable._keys import _closure_function as clo, _rules as rules


_SHIFT = 0.5


def _factory(lr):
    # Like optax's: a local function closing over the hyperparameter, with defaults and keyword
    # defaults of its own, reading a global.
    lr = jnp.asarray(lr)

    def update(g, scale=1.0, *, sign=-1.0):
        return sign * scale * lr * g + _SHIFT

    return update


def _other_factory(lr):
    lr = jnp.asarray(lr)

    def update(g, scale=1.0, *, sign=-1.0):
        return sign * scale * lr * g - _SHIFT

    # The same names as `_factory`'s: only the code differs.
    update.__qualname__ = "_factory.<locals>.update"
    return update


def _eager(u, g):
    return np.asarray(u(g))


def _counted(jit):
    traces = 0

    @jit
    def step(u, g):
        nonlocal traces
        traces += 1
        return u(g)

    return step, lambda: traces


@pytest.mark.counts_traces
def test_rebuilt_with_a_new_learning_rate_array_is_one_trace():
    g = jnp.arange(3.0)
    step, traces = _counted(es.filter_jit)
    for lr in (1e-3, 1e-2, 0.5):
        u = eqxi.closure_to_pytree(_factory(lr))
        np.testing.assert_allclose(np.asarray(step(u, g)), _eager(u, g), rtol=1e-6)
    assert traces() == 1
    assert step.cache_info().hits == 2


@pytest.mark.counts_traces
def test_under_plain_equinox_after_stabilize():
    class Holder(es.StableModule):
        u: Any

    g = jnp.arange(3.0)
    step, traces = _counted(eqx.filter_jit)
    for lr in (1e-3, 1e-2):
        h = Holder(eqxi.closure_to_pytree(_factory(lr)))
        np.testing.assert_allclose(np.asarray(step(h.u, g)), _eager(h.u, g), rtol=1e-6)
    assert traces() == 1


def _with_defaults(u, defaults=None, kwdefaults=None):
    if defaults is not None:
        u.fn.fn.__defaults__ = defaults
    if kwdefaults is not None:
        u.fn.fn.__kwdefaults__ = kwdefaults
    return u


def _with_globals(lr, shift):
    f = _factory(lr)
    namespace = dict(f.__globals__, _SHIFT=shift)
    g = types.FunctionType(f.__code__, namespace, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = {"sign": -1.0}
    g.__qualname__ = f.__qualname__
    return g


@pytest.mark.counts_traces
@pytest.mark.parametrize(
    "second",
    [
        lambda: eqxi.closure_to_pytree(_other_factory(1e-2)),
        lambda: _with_defaults(eqxi.closure_to_pytree(_factory(1e-2)), defaults=(2.0,)),
        lambda: _with_defaults(eqxi.closure_to_pytree(_factory(1e-2)), kwdefaults={"sign": 1.0}),
        lambda: eqxi.closure_to_pytree(_with_globals(1e-2, 7.0)),
    ],
    ids=["code", "default", "kwdefault", "global"],
)
def test_closures_that_compute_differently_never_share(second):
    g = jnp.arange(3.0)
    step, traces = _counted(es.filter_jit)
    first = eqxi.closure_to_pytree(_factory(1e-3))
    other = second()
    for u in (first, other):
        np.testing.assert_allclose(np.asarray(step(u, g)), _eager(u, g), rtol=1e-6)
    assert traces() == 2
    assert es.stable_key(first.fn) != es.stable_key(other.fn)


@pytest.mark.counts_traces
def test_a_default_changed_in_place_is_seen():
    g = jnp.arange(3.0)
    step, traces = _counted(es.filter_jit)
    u = eqxi.closure_to_pytree(_factory(1e-3))
    step(u, g)
    u.fn.fn.__defaults__ = (4.0,)
    np.testing.assert_allclose(np.asarray(step(u, g)), _eager(u, g), rtol=1e-6)
    assert traces() == 2


def test_never_substituted_by_intern():
    a = eqxi.closure_to_pytree(_factory(1e-3)).fn
    b = eqxi.closure_to_pytree(_factory(1e-2)).fn
    assert es.stable_key(a) == es.stable_key(b)
    assert es.intern(a) is a
    assert es.intern(b) is b


def test_the_rule_follows_equinox_or_falls_back(monkeypatch):
    # Equinox moving or reshaping `_closure_to_pytree` fails here, and the class then keeps its
    # own row (`K-own-eq`: identity plus its own `==`), never this one.
    from equinox.internal import _closure_to_pytree as m

    assert clo.closure_function_class() is m._FunctionWithEquality
    assert rules.resolve(m._FunctionWithEquality) is clo.closure_function
    monkeypatch.delattr(m, "_adjust_function_closure")
    assert clo.closure_function_class() is None
    assert rules.resolve(m._FunctionWithEquality) is not clo.closure_function
