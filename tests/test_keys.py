"""`stable_key` and `intern`: what must share a key, and (the cardinal rule) what never may."""

import dataclasses
import enum
import functools as ft
import struct
import types
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import optax
import pytest

import eqxstable as es


def closure_over(value):
    return lambda x: x * value


def with_default(value):
    def f(x, a=value):
        return x * a

    return f


def with_kwdefault(value):
    def f(x, *, a=value):
        return x * a

    return f


def nested_closure(value):
    inner = closure_over(value)
    return lambda x: inner(x) + 1


def body(x, y: Any = 0):
    return x + y


def kwargs_in_order(**kwargs):
    return list(kwargs.values())


def other_body(x, y: Any = 0):
    return x - y


SOURCE = "def scale(x):\n    return x * FACTOR\n"


def from_source(factor) -> types.FunctionType:
    """The same source compiled in a fresh module namespace: same code, other globals."""
    namespace = {"FACTOR": factor}
    exec(compile(SOURCE, "<scaled>", "exec"), namespace)
    return namespace["scale"]


@dataclasses.dataclass(frozen=True)
class Scaler:
    factor: Any

    def apply(self, x):
        return x * self.factor


class Plain:
    def apply(self, x):
        return x


class Pair(NamedTuple):
    a: Any
    b: Any


class Color(enum.IntEnum):
    ONE = 1


class Tagged(int):
    """An `int` subclass with an attribute that its inherited `__eq__` ignores."""

    tag: str


def tagged(value, tag):
    out = Tagged(value)
    out.tag = tag
    return out


class ValueA:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, (ValueA, ValueB)) and self.v == other.v

    def __hash__(self):
        return hash(self.v)


class ValueB(ValueA):
    pass


def nan_with_payload(payload: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0]


def self_recursive(step):
    def rec(n):
        return 0 if n <= 0 else step + rec(n - 1)

    return rec


SHARED_LIST = [1.0]

# Pairs that look alike but may compute differently: each must get different keys and
# different canonical objects.
NOT_EQUIVALENT = {
    "closure 1 / 1.0": lambda: (closure_over(1), closure_over(1.0)),
    "closure 1 / True": lambda: (closure_over(1), closure_over(True)),
    "closure 1 / np.int32(1)": lambda: (closure_over(1), closure_over(np.int32(1))),
    "closure 1.0 / True": lambda: (closure_over(1.0), closure_over(True)),
    "closure 1.0 / np.float32(1)": lambda: (closure_over(1.0), closure_over(np.float32(1))),
    "closure np.int32 / np.int64": lambda: (closure_over(np.int32(1)), closure_over(np.int64(1))),
    "closure 0.0 / -0.0": lambda: (closure_over(0.0), closure_over(-0.0)),
    "0.0 / -0.0": lambda: (0.0, -0.0),
    "1 / 1.0": lambda: (1, 1.0),
    "1 / True": lambda: (1, True),
    "NaN payloads": lambda: (nan_with_payload(1), nan_with_payload(2)),
    "default 1 / 2": lambda: (with_default(1), with_default(2)),
    "default 1 / 1.0": lambda: (with_default(1), with_default(1.0)),
    "kw default 1 / 2": lambda: (with_kwdefault(1), with_kwdefault(2)),
    "nested closure 1 / 2": lambda: (nested_closure(1), nested_closure(2)),
    "partial keyword value": lambda: (ft.partial(body, y=1), ft.partial(body, y=2)),
    "partial keyword 1 / 1.0": lambda: (ft.partial(body, y=1), ft.partial(body, y=1.0)),
    "partial arg / keyword": lambda: (ft.partial(body, 1), ft.partial(body, x=1)),
    "partial keyword order": lambda: (
        ft.partial(kwargs_in_order, a=1, b=2),
        ft.partial(kwargs_in_order, b=2, a=1),
    ),
    "frozenset iteration order": lambda: (
        closure_over(frozenset([9, 1])),
        closure_over(frozenset([1, 9])),
    ),
    "partial function": lambda: (ft.partial(body, 1), ft.partial(other_body, 1)),
    "jtu.Partial args": lambda: (jtu.Partial(body, 1), jtu.Partial(body, 2)),
    "functools / jtu partial": lambda: (ft.partial(body, 1), jtu.Partial(body, 1)),
    "eqx.Partial keywords": lambda: (eqx.Partial(body, y=1), eqx.Partial(body, y=1.0)),
    "jit / jit donate": lambda: (jax.jit(body), jax.jit(body, donate_argnums=0)),
    "jit / jit static": lambda: (jax.jit(body), jax.jit(body, static_argnums=1)),
    "jit body / other": lambda: (jax.jit(body), jax.jit(other_body)),
    "jit / plain": lambda: (jax.jit(body), body),
    "vmap in_axes": lambda: (jax.vmap(body, in_axes=0), jax.vmap(body, in_axes=(0, None))),
    "vmap out_axes": lambda: (jax.vmap(body, out_axes=0), jax.vmap(body, out_axes=1)),
    "grad argnums": lambda: (jax.grad(body, argnums=0), jax.grad(body, argnums=1)),
    "grad / value_and_grad": lambda: (jax.grad(body), jax.value_and_grad(body)),
    "checkpoint policy": lambda: (
        jax.checkpoint(body),
        jax.checkpoint(body, policy=jax.checkpoint_policies.everything_saveable),
    ),
    "eqx.filter_jit donate": lambda: (eqx.filter_jit(body), eqx.filter_jit(body, donate="all")),
    "eqx.filter_vmap in_axes": lambda: (
        eqx.filter_vmap(body, in_axes=0),
        eqx.filter_vmap(body, in_axes=1),
    ),
    "eqx.filter_grad / filter_value_and_grad": lambda: (
        eqx.filter_grad(body),
        eqx.filter_value_and_grad(body),
    ),
    "same source, other globals": lambda: (from_source(2.0), from_source(2.0)),
    "closure over equal lists": lambda: (closure_over([1.0]), closure_over([1.0])),
    "closure over equal dicts": lambda: (closure_over({"a": 1}), closure_over({"a": 1})),
    "closure over plain objects": lambda: (closure_over(Plain()), closure_over(Plain())),
    "closure over equal np arrays": lambda: (closure_over(np.ones(3)), closure_over(np.ones(3))),
    "closure over equal jax arrays": lambda: (
        closure_over(jnp.ones(3)),
        closure_over(jnp.ones(3)),
    ),
    "np dtype int32 / float32": lambda: (np.ones(3, np.int32), np.ones(3, np.float32)),
    "np shape (3,) / (1, 3)": lambda: (np.ones(3), np.ones((1, 3))),
    "np bytes": lambda: (np.array([0.0]), np.array([-0.0])),
    "bound method frozen dataclass 1 / 2": lambda: (Scaler(1).apply, Scaler(2).apply),
    "bound method frozen dataclass 1 / 1.0": lambda: (Scaler(1).apply, Scaler(1.0).apply),
    "bound method plain objects": lambda: (Plain().apply, Plain().apply),
    "optax adam 1e-3 / 1e-4": lambda: (optax.adam(1e-3), optax.adam(1e-4)),
    "optax adam / adamw": lambda: (optax.adam(1e-3), optax.adamw(1e-3)),
    "optax sgd momentum": lambda: (optax.sgd(0.1, momentum=0.9), optax.sgd(0.1, momentum=0.8)),
    "tuple (1,) / (1.0,)": lambda: ((1,), (1.0,)),
    "tuple / NamedTuple": lambda: ((1, 2), Pair(1, 2)),
    "frozenset {1} / {True}": lambda: (frozenset({1}), frozenset({True})),
    "frozen dataclass 1 / 1.0": lambda: (Scaler(1), Scaler(1.0)),
    "IntEnum member / int": lambda: (Color.ONE, 1),
    "str / bytes": lambda: ("a", b"a"),
    "empty ranges": lambda: (range(0), range(2, 2)),
    "slices 1 / 1.0": lambda: (slice(1), slice(1.0)),
    "lambda bodies": lambda: ((lambda x: x + 1), (lambda x: x - 1)),
    "cross-type __eq__": lambda: (ValueA(1), ValueB(1)),
    "int subclass attributes": lambda: (tagged(1, "a"), tagged(1, "b")),
    "self-recursive closures": lambda: (self_recursive(1), self_recursive(2)),
    "eqx.nn.Lambda": lambda: (eqx.nn.Lambda(closure_over(1)), eqx.nn.Lambda(closure_over(2))),
}


@pytest.mark.parametrize("name", list(NOT_EQUIVALENT))
def test_not_equivalent(name):
    a, b = NOT_EQUIVALENT[name]()
    assert es.stable_key(a) != es.stable_key(b)
    assert es.stable_key(b) != es.stable_key(a)
    canonical_a = es.intern(a)
    canonical_b = es.intern(b)
    assert canonical_a is not canonical_b
    # Interning never hands one out for the other, in either order.
    assert es.stable_key(canonical_b) == es.stable_key(b)


def test_enough_lookalike_pairs():
    assert len(NOT_EQUIVALENT) >= 30


def test_numbers_are_four_keys():
    keys = {es.stable_key(v) for v in (1, 1.0, True, np.int32(1))}
    assert len(keys) == 4


# Objects built twice from equivalent parts: the same key and the same canonical instance.
EQUIVALENT = {
    "lambda": lambda: closure_over(2.0),
    "closure over tuple": lambda: closure_over((1, "a", None)),
    "default": lambda: with_default(3),
    "kw default": lambda: with_kwdefault(3),
    "nested closure": lambda: nested_closure(1.5),
    "NaN": lambda: closure_over(float("nan")),
    "functools.partial": lambda: ft.partial(body, y=1),
    "jtu.Partial": lambda: jtu.Partial(body, y=1),
    "eqx.Partial": lambda: eqx.Partial(body, y=1),
    "partial of lambda": lambda: ft.partial(closure_over(2), 3),
    "jax.jit": lambda: jax.jit(body),
    "jax.jit options": lambda: jax.jit(body, donate_argnums=0, static_argnames="y"),
    "jax.jit(jnp.sin)": lambda: jax.jit(jnp.sin),
    "jax.vmap": lambda: jax.vmap(body, in_axes=(0, None)),
    "jax.grad": lambda: jax.grad(body, argnums=1),
    "jax.value_and_grad": lambda: jax.value_and_grad(body, has_aux=False),
    "jax.checkpoint": lambda: jax.checkpoint(body),
    "jit of vmap of lambda": lambda: jax.jit(jax.vmap(closure_over(2.0))),
    "eqx.filter_jit": lambda: eqx.filter_jit(body),
    "eqx.filter_vmap": lambda: eqx.filter_vmap(body),
    "eqx.filter_grad": lambda: eqx.filter_grad(body),
    "eqx.filter_value_and_grad": lambda: eqx.filter_value_and_grad(body),
    "eqx.filter_checkpoint": lambda: eqx.filter_checkpoint(body),
    "eqx.nn.Lambda": lambda: eqx.nn.Lambda(closure_over(2)),
    "bound method of frozen dataclass": lambda: Scaler(2).apply,
    "optax.adam": lambda: optax.adam(1e-3),
    "optax chain": lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4)),
    "NamedTuple of lambdas": lambda: Pair(closure_over(1), closure_over(2)),
    "tuple of values": lambda: (1, 2.0, "x", None, (True, b"y")),
    "frozenset": lambda: frozenset({1, "a"}),
    "frozen dataclass": lambda: Scaler((1, 2)),
    "numpy scalar": lambda: np.float32(0.5),
    "numpy array": lambda: np.arange(6.0).reshape(2, 3),
    "enum member": lambda: Color.ONE,
    "self-recursive closure": lambda: self_recursive(1),
    "same source, same globals": lambda: types.FunctionType(from_source(2.0).__code__, GLOBALS),
}
GLOBALS = {"FACTOR": 2.0}


@pytest.mark.parametrize("name", list(EQUIVALENT))
def test_equivalent_when_rebuilt(name):
    a, b = EQUIVALENT[name](), EQUIVALENT[name]()
    if not isinstance(a, (int, float, str, bytes, tuple, enum.Enum, np.generic)):
        assert a is not b
    assert es.stable_key(a) == es.stable_key(b)
    assert hash(es.stable_key(a)) == hash(es.stable_key(b))
    if name in OWN_DICTS or name in HOLD_A_NAN or name in REACH_THEMSELVES:
        # Each owns a dict that can change in place (keywords, keyword defaults), or holds a NaN
        # (unequal to every other NaN object, `test_registry_nan.py`): equivalent now, yet never
        # substituted (CONTRACT section 1, "intern never changes behaviour").
        assert es.intern(a) is a and es.intern(b) is b
    elif isinstance(a, np.ndarray):
        # An array's holders each get a read-only view of their own over immutable memory
        # (attack 11c-10: `view.shape = ...` must change no other holder's array).
        ia, ib = es.intern(a), es.intern(b)
        assert ia is not ib and type(ia.base) is bytes and np.array_equal(ia, ib)
    else:
        assert es.intern(a) is es.intern(b)
    assert not es.stable_key(a).identity


# The kinds above that hold a NaN: keyed by its bits, never substituted.
HOLD_A_NAN = {"NaN"}
# Its state reaches its own object, which it may use as state (`rec.depth = 3`): equivalent,
# never substituted (`test_registry_self_reference.py`).
REACH_THEMSELVES = {"self-recursive closure"}


# The kinds above that own a mutable dict (`test_registry_owned_dicts.py`): every partial, whose
# keywords dict (empty or not) can change in place, and whose `__setstate__` replaces it all.
OWN_DICTS = frozenset(
    {"kw default", "functools.partial", "jtu.Partial", "eqx.Partial", "partial of lambda"}
)


def test_first_seen_is_canonical():
    first, second = closure_over(7), closure_over(7)
    assert es.intern(first) is first
    assert es.intern(second) is first


def test_identity_objects_returned_unchanged():
    for make in (lambda: [1], lambda: {"a": 1}, Plain, lambda: bytearray(b"x")):
        obj, twin = make(), make()
        assert es.intern(obj) is obj
        before = es.stable_key(obj)
        es.clear_caches()  # The memo forgotten: the key is computed afresh, another object.
        again = es.stable_key(obj)
        assert again is not before and again == before
        assert before.identity
        # An equal object of its own is another key.
        assert es.stable_key(twin) != before
    array = jnp.ones(2)
    assert es.intern(array) is array
    assert es.stable_key(array).identity
    assert es.stable_key(array) != es.stable_key(jnp.ones(2))


def test_numpy_canonical_is_read_only_copy():
    a = np.arange(3.0)
    canonical = es.intern(a)
    assert canonical is not a and a.flags.writeable and not canonical.flags.writeable
    np.testing.assert_array_equal(canonical, a)
    # A view of its own over the same immutable copy (attack 11c-09, 10): nothing can make it
    # writeable again, and assigning its shape changes no other holder's.
    again = es.intern(np.arange(3.0))
    assert again is not canonical and type(again.base) is bytes
    with pytest.raises(ValueError):
        again.flags.writeable = True
    again.shape = (3, 1)
    assert canonical.shape == (3,)
    # Mutating the original after interning changes its key and never the canonical.
    a[0] = 10.0
    assert es.stable_key(a) != es.stable_key(canonical)
    assert es.intern(a) is not canonical
    assert canonical[0] == 0.0
    assert jnp.asarray(canonical).sum() == 3.0


def test_tuple_with_array_is_never_substituted():
    # A container holding an array is handed back as it is (attack 11c-03): a copy of it would
    # not `==` the user's own container (Python compares items by `is` first, and an array's
    # `==` is elementwise), and its array is the user's to change.
    t = (np.ones(2), 1)
    assert es.intern(t) is t and es.intern((np.ones(2), 1)) is not t
    assert es.stable_key(t) == es.stable_key((np.ones(2), 1))


def test_hash_without_eq_warns():
    class OnlyHash:
        def __hash__(self):
            return 0

    with pytest.warns(es.StabilityWarning, match="OnlyHash.*defines `__hash__` but not `__eq__`"):
        key = es.stable_key(OnlyHash())
    assert key.identity


def test_key_of_unreadable_object_falls_back_to_identity():
    class Broken:
        def __eq__(self, other):
            raise RuntimeError

        def __hash__(self):
            raise RuntimeError

    a, b = Broken(), Broken()
    assert es.stable_key(a) != es.stable_key(b)
    assert es.stable_key(closure_over(a)) != es.stable_key(closure_over(b))


def test_deep_structures_terminate():
    deep: Any = 0
    for _ in range(5000):
        deep = (deep,)
    # Deeper than `MAX_DEPTH`: walked in cuts from the top, keyed by value as a shallow tuple is
    # (it cannot change); one more level, or another leaf, is another key.
    f = closure_over(deep)
    assert es.stable_key(f) == es.stable_key(closure_over(deep))
    assert es.stable_key(f) != es.stable_key(closure_over((deep,)))
    other: Any = 1
    for _ in range(5000):
        other = (other,)
    assert es.stable_key(f) != es.stable_key(closure_over(other))
    # Shallower than the limit: keyed by value as usual.
    shallow: Any = 0
    for _ in range(50):
        shallow = (shallow,)
    assert es.stable_key(closure_over(shallow)) == es.stable_key(closure_over(shallow))


def test_a_pytreedef_held_as_a_value_is_keyed_node_by_node():
    # Its own `==` (and, on older jaxlib, its pickled state) makes `1` and `1.0` in node data one
    # key; a dict node's key list, made afresh by each `node_data()`, is keyed by contents.
    class M(eqx.Module):
        k: float = eqx.field(static=True)

    structure = jax.tree_util.tree_structure
    assert es.stable_key(structure(M(1))) != es.stable_key(structure(M(1.0)))
    assert es.stable_key(structure(M(1))) == es.stable_key(structure(M(1)))
    assert es.stable_key(structure({"a": 1})) == es.stable_key(structure({"a": 2}))
    assert es.stable_key(structure({"a": 1})) != es.stable_key(structure({"b": 1}))
