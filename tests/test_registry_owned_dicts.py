"""Objects that own a dict which can change in place are never substituted (CONTRACT section 1,
"`intern` never changes behaviour"; attack5 finding 11).

A `functools.partial`, `jax.tree_util.Partial` or `equinox.Partial` with keywords, and a function
with keyword-only defaults or attributes of its own, each hold their *own* dict: two equal ones
read two dicts, and whoever owns the first can update it in place. So `es.intern` returns each of
them unchanged (their keys stay equal: `es.filter_jit` shares one program between them, watching
the dicts). A `StableModule` compares such a value in a static field by its key, so plain
`equinox.filter_jit` still shares a program between rebuilt modules; in a dynamic field it is a
leaf that Equinox compares by identity, as in an `equinox.Module` (the cost of the rule).
"""

import functools as ft
import struct
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es

from .helpers import counting_filter_jit


def scale(x, k):
    return x * k


def with_kwdefault():
    def act(x, *, k=2.0):
        return x * k

    return act


def with_attribute():
    def act(x):
        return x * act.scale  # pyright: ignore[reportFunctionMemberAccess]

    act.scale = 2.0  # pyright: ignore[reportFunctionMemberAccess]
    return act


PARTIALS = {
    "functools.partial": lambda: ft.partial(scale, k=2.0),
    "jtu.Partial": lambda: jtu.Partial(scale, k=2.0),
    "eqx.Partial": lambda: eqx.Partial(scale, k=2.0),
}


def _update(obj: Any, value: float) -> None:
    """What the owner of `obj` does later: changes its own dict in place."""
    if isinstance(obj, (ft.partial, eqx.Partial)):
        obj.keywords["k"] = value
    elif obj.__kwdefaults__:
        obj.__kwdefaults__["k"] = value
    else:
        obj.scale = value


MAKERS = {**PARTIALS, "kwdefaults": with_kwdefault, "attribute": with_attribute}


@pytest.mark.parametrize("name", list(MAKERS))
def test_intern_never_hands_out_an_object_owning_another_dict(name):
    make = MAKERS[name]
    theirs, ours = make(), make()
    assert es.stable_key(theirs) == es.stable_key(ours)  # Equivalent now.
    es.intern(theirs)
    got = es.intern(ours)
    assert got is ours
    _update(theirs, 9.0)
    x = jnp.float32(1.5)
    assert float(got(x)) == float(ours(x)) == 3.0
    assert float(theirs(x)) == 13.5


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_module_reads_its_own_object(name):
    make = MAKERS[name]

    class Box(es.StableModule):
        fn: Any = eqx.field(static=True)
        dyn: Any

    theirs = make()
    es.intern(theirs)
    box = Box(make(), make())
    _update(theirs, 9.0)
    x = jnp.float32(1.0)
    assert float(box.fn(x)) == 2.0 and float(box.dyn(x)) == 2.0


@pytest.mark.counts_traces
@pytest.mark.parametrize("name", list(MAKERS))
def test_plain_filter_jit_shares_rebuilt_static_values_and_follows_an_update(name):
    make = MAKERS[name]

    class Box(es.StableModule):
        fn: Any = eqx.field(static=True)

    run, traces = counting_filter_jit(lambda box, x: box.fn(x))

    x = jnp.arange(3.0)
    first = Box(make())
    for _ in range(4):  # Rebuilt: one program, compared by key.
        np.testing.assert_allclose(run(Box(make()), x), 2.0 * x)
    assert traces() == 1
    assert Box(make()) == Box(make())
    if name == "eqx.Partial":
        # A module in a static field is walked: its keywords dict is frozen there, read-only.
        with pytest.raises(TypeError, match="read-only"):
            _update(first.fn, 5.0)
        return
    _update(first.fn, 5.0)  # The first module's own object changes: never its old program.
    np.testing.assert_allclose(run(first, x), 5.0 * x)
    assert traces() == 2
    np.testing.assert_allclose(run(Box(make()), x), 2.0 * x)
    assert traces() == 2


@pytest.mark.counts_traces
@pytest.mark.parametrize("name", list(MAKERS))
def test_stable_filter_jit_shares_rebuilt_dynamic_values(name):
    # In a dynamic field the object is a leaf that plain Equinox compares by identity (one
    # program per rebuild, as for an `eqx.Module`); `es.filter_jit` keys it by value.
    make = MAKERS[name]

    class Box(es.StableModule):
        fn: Any

    traces = 0

    @es.filter_jit
    def run(box, x):
        nonlocal traces
        traces += 1
        return box.fn(x)

    x = jnp.arange(3.0)
    for _ in range(4):
        np.testing.assert_allclose(run(Box(make()), x), 2.0 * x)
    assert traces == 1


@pytest.mark.counts_traces
def test_mlp_with_a_partial_activation_costs_what_an_equinox_module_costs():
    # The measured cost of the rule: an `eqx.nn.MLP` with a keyword partial as its activation,
    # rebuilt, is one program under `es.filter_jit` and one per rebuild under plain
    # `equinox.filter_jit` (as a plain `eqx.Module`); the answer is right either way.
    class Net(es.StableModule):
        mlp: eqx.nn.MLP

        def __init__(self):
            act = ft.partial(jax.nn.leaky_relu, negative_slope=0.2)
            self.mlp = eqx.nn.MLP(3, 3, 8, 2, activation=act, key=jax.random.key(0))

    counts = {}
    x = jnp.arange(3.0)
    want = Net().mlp(x)
    for name, jit in (("plain", eqx.filter_jit), ("stable", es.filter_jit)):
        traces = 0

        def body(net, x):
            nonlocal traces
            traces += 1
            return net.mlp(x)

        run = jit(body)
        for _ in range(3):
            np.testing.assert_allclose(run(Net(), x), want, rtol=1e-6)
        counts[name] = traces
    assert counts == {"plain": 3, "stable": 1}


@settings(max_examples=30, deadline=None)
@given(
    a=st.floats(-4, 4, width=32, allow_subnormal=False),
    b=st.floats(-4, 4, width=32, allow_subnormal=False),
)
def test_static_partials_share_exactly_when_their_keywords_are_equal(a, b):
    class Box(es.StableModule):
        fn: Any = eqx.field(static=True)

    run, traces = counting_filter_jit(lambda box, x: box.fn(x))

    x = jnp.float32(1.0)
    assert float(run(Box(ft.partial(scale, k=a)), x)) == np.float32(a)
    assert float(run(Box(ft.partial(scale, k=b)), x)) == np.float32(b)
    # Keys are type-exact and compare a float by its bits (`0.0` and `-0.0` are two programs).
    assert traces() == (1 if struct.pack("<d", a) == struct.pack("<d", b) else 2)
