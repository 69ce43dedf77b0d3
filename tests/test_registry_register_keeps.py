"""`register` hands out another object only where `intern` would (attack round 14a, finding 03):
re-registering a callable equivalent to the name's but of a kind `intern` keeps (a partial's
keywords, a function's attributes can change in place) returns the caller's own callable, so a
later change to the first registrant's object reaches neither the second's model nor its
answers, under plain `eqx.filter_jit` or eagerly."""

import functools as ft
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import pytest

import eqxstable as es


def _scale(x, k=1.0):
    return x * k


def _attr_fn():
    def g(x):
        return x * g.scale  # pyright: ignore[reportFunctionMemberAccess]

    g.scale = 2.0  # pyright: ignore[reportFunctionMemberAccess]
    return g


def _partial():
    return ft.partial(_scale, k=2.0)


def _change(fn):
    if isinstance(fn, ft.partial):
        fn.keywords["k"] = 5.0
    else:
        fn.scale = 5.0


class Model(eqx.Module):
    act: Callable = eqx.field(static=True)

    def __call__(self, x):
        return self.act(x)


@pytest.mark.parametrize("make", [_partial, _attr_fn], ids=["partial", "attributes"])
def test_register_returns_the_callers_own_changeable_callable(make):
    name = f"keeps-{make.__name__}"
    first, second = make(), make()
    assert es.register(name, first) is first
    got = es.register(name, second)
    assert got is second and es.intern(second) is second
    assert es.lookup(name) is first
    model = Model(got)
    x = jnp.array(1.0)
    run = eqx.filter_jit(lambda m, x: m(x))
    assert float(run(model, x)) == 2.0
    _change(first)
    assert float(first(1.0)) == 5.0
    # The second registrant's model still computes with its own, unchanged callable.
    assert float(model(x)) == 2.0 and float(run(Model(got), x)) == 2.0
    # And the name, holding a callable no longer equivalent, refuses the old value.
    with pytest.raises(es.RegistryError, match=name):
        es.register(name, make())


def test_register_still_returns_the_canonical_function():
    def make():
        return lambda x: x * 3.0

    first = es.register("keeps-lambda", make())
    assert es.register("keeps-lambda", make()) is first
    es.clear_caches()
    assert es.register("keeps-lambda", make()) is first


@pytest.mark.usefixtures("small_budget")
def test_register_says_when_equivalence_cannot_be_checked():
    # Attack round 14c, finding 03: a rebuilt activation closing over data past the object
    # budget was refused as "not equivalent", with "an equivalent rebuilt one is fine".
    vocab = [{"a": [i, i + 1]} for i in range(1_100)]

    def make():
        return lambda x: x * len(vocab)

    es.register("keeps-past-budget", make())
    with pytest.raises(es.RegistryError) as raised:
        es.register("keeps-past-budget", make())
    message = str(raised.value)
    assert "cannot be checked" in message and "not equivalent" not in message
    assert "a list of 1,100 items (dict)" in message
    assert "eqxstable.lookup('keeps-past-budget')" in message
