"""`es.stabilize`: the canonicalisation of `StableModule` for any PyTree, and the hashable
canonical forms (`freeze`, `_canonical.py`) it stores in the static fields of plain modules."""

import collections
import functools as ft
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import pytest
from hypothesis import given

import eqxstable as es
from eqxstable._module._freezer import freeze

from .helpers import compile_log, counting_filter_jit


_KEY = jr.key(0)
_X = jnp.array([0.5, -1.0], dtype=jnp.float32)


def _make_mlp() -> eqx.nn.MLP:
    return eqx.nn.MLP(2, 2, 8, 2, activation=lambda x: jnp.tanh(2.0 * x), key=_KEY)


def test_plain_mlp_with_lambda_activation_traces_once():
    run, traces = counting_filter_jit(lambda model, x: model(x))
    reference = _make_mlp()
    with compile_log() as log:
        for i in range(5):
            out = run(es.stabilize(_make_mlp()), _X + i)
            # Jitted (fused) against op-by-op: on a GPU the two differ in the last bits.
            np.testing.assert_allclose(out, reference(_X + i), rtol=1e-5)
    assert traces() == 1
    assert log.count("run") == 1


def test_idempotent_and_returns_a_stable_tree_itself():
    mlp = es.stabilize(_make_mlp())
    assert es.stabilize(mlp) is mlp
    tree = {"mlp": mlp, "fns": [ft.partial(jnp.add, 1.0)], "n": (1, "relu", None)}
    once = es.stabilize(tree)
    assert es.stabilize(once) is once
    assert es.stabilize(_make_mlp()).activation is mlp.activation


def test_arrays_are_kept_and_the_input_is_not_changed():
    mlp = _make_mlp()
    activation = mlp.activation
    es.stabilize(_make_mlp())  # Makes some other lambda canonical.
    out = es.stabilize(mlp)
    assert mlp.activation is activation
    assert out.layers[0].weight is mlp.layers[0].weight
    numpy_leaf = np.ones(3)
    assert es.stabilize([numpy_leaf])[0] is numpy_leaf  # An array leaf is traced, not static.


class Pair(NamedTuple):
    first: Callable
    second: Callable


class Point(NamedTuple):
    x: Any
    y: Any


def _containers() -> Any:
    return {
        "list": [lambda x: x + 1],
        # Pytree partials: a `functools.partial` leaf is never substituted (it can change in
        # place, attack round 10a, finding 01), so plain Equinox, which compares it by identity,
        # retraces each rebuild; JAX's `Partial` holding one (boxed in a shim compared with
        # `==`) too.
        "tuple": (jtu.Partial(jnp.multiply, 3.0),),
        "namedtuple": Pair(lambda x: x - 1, jax.jit(jnp.cos)),
        "ordered": collections.OrderedDict(f=lambda x: 2 * x),
        "jtu_partial": jtu.Partial(lambda x, y: x * y, jnp.ones(2)),
        "eqx_partial": eqx.Partial(lambda x, y: x / y, y=2.0),
        "sequential": eqx.nn.Sequential([eqx.nn.Lambda(lambda x: x**2)]),
    }


def test_recurses_into_every_container():
    a, b = es.stabilize(_containers()), es.stabilize(_containers())
    assert a["list"][0] is b["list"][0]
    assert a["tuple"][0].func is b["tuple"][0].func
    assert type(a["namedtuple"]) is Pair
    assert a["namedtuple"].first is b["namedtuple"].first
    assert a["namedtuple"].second is b["namedtuple"].second
    assert type(a["ordered"]) is collections.OrderedDict
    assert a["ordered"]["f"] is b["ordered"]["f"]
    assert type(a["jtu_partial"]) is jtu.Partial
    assert a["jtu_partial"].func is b["jtu_partial"].func
    assert a["eqx_partial"].func is b["eqx_partial"].func
    assert a["sequential"].layers[0].fn is b["sequential"].layers[0].fn
    assert jtu.tree_structure(a) == jtu.tree_structure(b)

    traces = 0

    @eqx.filter_jit
    def run(tree, x):
        nonlocal traces
        traces += 1
        return (
            tree["list"][0](x),
            tree["tuple"][0](x),
            tree["namedtuple"].first(x) + tree["namedtuple"].second(x),
            tree["ordered"]["f"](x),
            tree["jtu_partial"](x),
            tree["eqx_partial"](x),
            tree["sequential"](x),
        )

    for _ in range(3):
        out = run(es.stabilize(_containers()), _X)
    expected = (_X + 1, 3 * _X, _X - 1 + jnp.cos(_X), 2 * _X, _X, _X / 2, _X**2)
    for got, want in zip(out, expected):  # pyright: ignore[reportPossiblyUnboundVariable]
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert traces == 1


def test_static_fields_of_plain_modules():
    class Plain(eqx.Module):
        fn: Callable = eqx.field(static=True)
        sizes: list = eqx.field(static=True)

        def __call__(self, x):
            return self.fn(x) * len(self.sizes)

    def make():
        return es.stabilize(Plain(lambda x: x + 1, [1, 2]))

    a, b = make(), make()
    assert a.fn is b.fn
    assert a.sizes == [1, 2] and isinstance(a.sizes, list)
    # Each module owns its list (a write by C code, `heapq.heappush`, changes no other one's),
    # of one class with every equal one: equal, one hash, so JAX shares their programs.
    assert a.sizes is not b.sizes and a.sizes == b.sizes and hash(a.sizes) == hash(b.sizes)
    assert jtu.tree_structure(a) == jtu.tree_structure(b)


def test_jax_array_in_a_static_field_is_an_error():
    class Plain(eqx.Module):
        weight: Any = eqx.field(static=True)

    with pytest.warns(UserWarning, match="JAX array is being set as static"):
        plain = Plain(jnp.ones(2))
    with pytest.raises(ValueError, match=r"`eqxstable.stabilize`: the static field `tree.weight`"):
        es.stabilize(plain)
    with pytest.raises(ValueError, match=r"`tree\[0\]\['m'\].weight`.*Make `weight` a regular"):
        es.stabilize([{"m": plain}])


#
# The canonical forms of static values in a plain module (property tests against the original:
# tests/test_static_readback.py).
#


def test_canonical_dict_reads_like_a_dict():
    d = freeze({"a": 1, "b": (2, 3)})
    assert isinstance(d, dict) and d == {"a": 1, "b": (2, 3)} and {"a": 1, "b": (2, 3)} == d
    assert d["a"] == 1 and d.get("c") is None and "b" in d and len(d) == 2
    assert list(d.items()) == [("a", 1), ("b", (2, 3))]
    assert d | {"c": 4} == {"a": 1, "b": (2, 3), "c": 4}
    assert repr(d) == "{'a': 1, 'b': (2, 3)}"
    with pytest.raises(TypeError, match=r"`dict.__setitem__`: .*read-only.*`dict\(...\)`"):
        d["a"] = 2  # pyright: ignore[reportIndexIssue]
    # Insertion order is part of the value: iterating code may depend on it.
    assert freeze({"a": 1, "b": 2}) != freeze({"b": 2, "a": 1})


def test_canonical_forms_are_one_object_per_class_and_type_exact():
    for make in (lambda v: [v], lambda v: {"k": v}, lambda v: {v}, lambda v: frozenset([v])):
        one, flt, true = freeze(make(1)), freeze(make(1.0)), freeze(make(True))
        # One class (`==`, one hash), one object per `freeze` for what can change in place.
        assert freeze(make(1)) == one and hash(freeze(make(1))) == hash(one)
        # Python calls the originals equal; a program traced for one computes in another type.
        assert one != flt and one != true and flt != true
        assert one == make(1) == one and one == make(1.0)  # Against the original kind: its `==`.
    # Inside a tuple, which JAX compares with `==`, too.
    assert freeze(([1],)) != freeze(([1.0],)) and freeze(([1],)) == freeze(([1],))
    assert freeze(np.float32(2)) != freeze(np.float64(2))
    scalar = freeze(np.float32(2))
    assert isinstance(scalar, np.float32)  # pyright: ignore[reportArgumentType]
    assert repr(scalar) == repr(np.float32(2))


def test_static_sets_iterate_as_assigned():
    a, b = {1, 9}, {9, 1}
    assert list(a) != list(b)  # Equal sets, iterating differently: part of the value.
    fa, fb = freeze(a), freeze(b)
    assert list(fa) == list(a) and list(fb) == list(b) and fa != fb
    assert repr(fb) == repr(b) and list(freeze(frozenset(b))) == list(frozenset(b))


def test_canonical_array_works_like_an_array():
    r = freeze(np.arange(3.0, dtype=np.float32))
    assert isinstance(r, np.ndarray) and r.dtype == np.float32 and r.shape == (3,)
    assert type(r + 1) is np.ndarray and type(r[1:]) is np.ndarray
    np.testing.assert_array_equal(r == 1.0, [False, True, False])  # Elementwise.
    np.testing.assert_array_equal(jnp.asarray(r), [0.0, 1.0, 2.0])
    assert jnp.asarray(r).dtype == jnp.float32 and repr(r) == repr(np.arange(3.0, dtype="f4"))
    assert r[1] == 1.0 and len(r) == 3 and list(r) == [0.0, 1.0, 2.0]
    np.testing.assert_array_equal(r * jnp.ones(3), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(jnp.ones(3) + r, [1.0, 2.0, 3.0])
    out = jax.jit(lambda x: (r @ x, x * r, 2 - r, x[r.astype(int)]))(jnp.ones(3))
    np.testing.assert_array_equal(out[0], 3.0)
    np.testing.assert_array_equal(out[1], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(out[2], [2.0, 1.0, 0.0])
    with pytest.raises(ValueError, match=r"read-only.*`np.array\(...\)`"):
        r[0] = 5.0
    with pytest.raises(ValueError, match="read-only"):
        r += 1
    again = freeze(np.arange(3.0, dtype=np.float32))
    assert again is not r and again == r and hash(again) == hash(r)  # One class, own objects.
    assert freeze(np.arange(3.0, dtype=np.float64)) != r


def test_freeze_converts_recursively():
    value = {"a": [1, {2, 3}], "b": {"c": np.zeros(2)}, "d": Point(1, [2])}
    frozen = freeze(value)
    assert type(frozen["d"]) is Point and frozen["d"] == Point(1, [2])
    assert frozen["a"] == [1, {2, 3}] and np.array_equal(frozen["b"]["c"], np.zeros(2))
    hash(frozen)
    # JAX compares a tuple item by item: a list in one is canonical (hashable, type-exact).
    assert freeze(Point(1, [2])) == freeze(Point(1, [2])) != freeze(Point(1, [2.0]))
    hash(freeze(Point(1, [2])))
    assert freeze(frozen) is frozen and freeze(value) == frozen
    assert hash(freeze(value)) == hash(frozen)


_arrays = hnp.arrays(
    dtype=st.sampled_from([np.float32, np.float64, np.int32, np.bool_]),
    shape=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
)


@given(_arrays, _arrays)
def test_canonical_array_identity_is_dtype_shape_and_bytes(a, b):
    ra, rb = freeze(a), freeze(b)
    same = (a.dtype.str, a.shape, a.tobytes()) == (b.dtype.str, b.shape, b.tobytes())
    assert (ra == rb) == same  # One class (each `freeze` its own object).
    if same:
        assert hash(ra) == hash(rb)
    if not same:
        assert not (ra == rb) and ra != rb  # What JAX asks when it compares two structures.


@given(_arrays)
def test_canonical_array_is_a_copy(a):
    r = freeze(a)
    before = a.tobytes()
    a[...] = 1
    assert r.tobytes() == before
    assert not r.flags.writeable


def test_registry_interns_frozensets_that_iterate_differently():
    # Equal frozensets can iterate in different orders, so their keys include the order.
    def make(values):
        return lambda x: jnp.stack([x * v for v in values])

    a, b = frozenset([9, 1]), frozenset([1, 9])
    assert a == b and list(a) != list(b)
    first, second = make(a), make(b)
    assert es.intern(first) is first
    x = jnp.ones(())
    np.testing.assert_array_equal(es.intern(second)(x), second(x))
