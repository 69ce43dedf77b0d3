"""The keys' less travelled paths, found by mutation testing (`scripts/mutation.sh`): arrays
reached through partials, methods and slices stay watched; module attributes read by a function;
builtins and their bound methods; object arrays; `Equal`; node data that is not a tuple."""

import collections
import functools as ft
import re
import types
import weakref
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import eqxstable as es
from eqxstable._keys import Equal, Key, warns_hash_without_eq


def key(obj: Any) -> Key:
    return es.stable_key(obj)


def body(x, y: Any = 0):
    return x * y


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


class Holder(NamedTuple):
    array: Any

    def scaled(self, x):
        return x * self.array

    def shifted(self, x):
        return x + self.array


def counted_apply():
    traces = 0

    def apply(x, f):
        nonlocal traces
        traces += 1
        return f(x)

    return es.filter_jit(apply), lambda: traces


@pytest.mark.parametrize(
    "make",
    [
        lambda a: ft.partial(body, y=a),
        lambda a: ft.partial(lambda a_, x: x * a_, a),
        lambda a: Holder(a).scaled,
    ],
    ids=["partial keyword", "partial argument", "bound method"],
)
@pytest.mark.counts_traces
def test_array_inside_a_static_callable_is_watched(make):
    a = np.full(2, 2.0, np.float32)
    f = make(a)
    jitted, traces = counted_apply()
    x = jnp.ones(2, jnp.float32)
    np.testing.assert_allclose(jitted(x, f), 2.0)
    np.testing.assert_allclose(jitted(x, f), 2.0)
    assert traces() == 1
    a[0] = 5.0
    np.testing.assert_allclose(jitted(x, f), [5.0, 2.0])
    assert traces() == 2
    # And by identity: an equal array of its own is another key.
    assert key(make(a)) != key(make(a.copy()))


def test_array_in_a_static_slice_is_watched():
    start = np.array(1)
    sl = slice(start, None)
    jitted, traces = counted_apply()
    x = jnp.arange(4.0)
    np.testing.assert_allclose(jitted(x, lambda v: v[sl]), [1.0, 2.0, 3.0])
    assert key(slice(start, 2)) != key(slice(np.array(1), 2))
    before = key(sl)
    start[()] = 2
    assert key(sl) != before


def test_methods_by_function_and_self():
    h = Holder((1, 2))
    assert key(Holder((1, 2)).scaled) == key(h.scaled)
    assert key(h.scaled) != key(h.shifted)
    assert key(h.scaled) != key(Holder((1, 3)).scaled)


def test_jitted_closures_by_what_they_close_over():
    def make(v):
        return jax.jit(lambda x: x * v)

    assert key(make(1.0)) == key(make(1.0))
    assert key(make(1.0)) != key(make(2.0))
    assert key(ft.partial(body, (1, 2), y=(3, 4))) == key(ft.partial(body, (1, 2), y=(3, 4)))


def test_builtins_and_their_bound_methods():
    assert key(len) != key(abs)
    assert not key(len).identity
    a, b = [1], [1]
    assert key(a.append) != key(b.append)
    assert key(a.append) != key(a.extend)
    before = key(a.append)
    a.append(2)
    assert key(a.append) != before
    assert key((1.5).hex) == key((1.5).hex)
    assert key((1.5).hex) != key((2.5).hex)
    assert key(np.add.reduce) == key(np.add.reduce)


def test_object_arrays_by_identity_and_items():
    a = np.array([1, "x"], dtype=object)
    b = np.array([1, "x"], dtype=object)
    assert key(a) != key(b)
    f = (lambda arr: lambda: arr)(a)
    before = key(f)
    assert key(f) == before
    a[0] = 2
    assert key(f) != before
    assert key(a).identity


def test_hash_without_eq_is_reported_by_type():
    class OnlyHash:
        def __hash__(self):
            return 0

    class Both:
        def __eq__(self, other):
            return self is other

        def __hash__(self):
            return 0

    assert warns_hash_without_eq(OnlyHash)
    assert not warns_hash_without_eq(Both)
    assert not warns_hash_without_eq(int)


class Weird:
    """`__eq__` answers with whatever it was given."""

    def __init__(self, answer, h=0):
        self.answer = answer
        self.h = h

    def __eq__(self, other):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def __hash__(self):
        return self.h


class Weird2(Weird):
    pass


def test_equal_is_the_objects_own_equality_within_one_type():
    assert Equal(Weird(True), 0) == Equal(Weird(True), 0)
    assert Equal(Weird(np.bool_(True)), 0) == Equal(Weird(np.bool_(True)), 0)
    assert Equal(Weird(False), 0) != Equal(Weird(False), 0)
    assert Equal(Weird(np.bool_(False)), 0) != Equal(Weird(np.bool_(False)), 0)
    assert Equal(Weird(np.ones(2, bool)), 0) != Equal(Weird(np.ones(2, bool)), 0)
    assert Equal(Weird(1), 0) != Equal(Weird(1), 0)
    assert Equal(Weird(RuntimeError()), 0) != Equal(Weird(RuntimeError()), 0)
    # Never across types, nor across hashes, whatever `__eq__` says.
    assert Equal(Weird(True), 0) != Equal(Weird2(True), 0)
    assert Equal(Weird(True), 0) != Equal(Weird(True), 1)
    assert Equal(Weird(True), 0) != Weird(True)
    w = Weird(False)
    assert Equal(w, 0) == Equal(w, 0)
    assert hash(Equal(Weird(True), 0)) == hash(Equal(Weird(True), 0))
    assert hash(Equal(Weird(True), 0)) != hash(Equal(Weird2(True), 0))
    assert Equal(w, 0).obj is w


def test_library_objects_with_their_own_equality():
    # A compiled pattern is on the allowlist: its pattern and flags, substituted by `intern`.
    a = re.compile("ab+", re.IGNORECASE)
    re.purge()
    b = re.compile("ab+", re.IGNORECASE)
    assert a is not b
    assert key(a) == key(b)
    assert key(a) != key(re.compile("ab+")) and key(a) != key(re.compile(b"ab+", re.I))
    assert es.intern(b) is es.intern(a)
    # A library value class not on it (`types.GenericAlias`): its own `==`, never substituted.
    c, d = types.GenericAlias(list, (int,)), types.GenericAlias(list, (int,))
    assert c is not d and key(c) == key(d) and key(c) != key(list[float])
    assert any(type(p) is Equal for p in key(c).parts)
    assert es.intern(d) is d


ATTR_MODULE = types.ModuleType("attr_module")
ATTR_MODULE.__file__ = __file__.replace(".py", "_fake.py")  # a user's file
ATTR_MODULE.LR = 0.1  # pyright: ignore[reportAttributeAccessIssue]


def reads_module_attribute(x):
    return x * ATTR_MODULE.LR  # pyright: ignore[reportAttributeAccessIssue]


def reads_missing_attribute(x):
    return x * ATTR_MODULE.LATER  # pyright: ignore[reportAttributeAccessIssue]


def test_module_attributes_read_by_a_function():
    before = key(reads_module_attribute)
    same_code = types.FunctionType(reads_module_attribute.__code__, globals())
    assert key(same_code) == before
    ATTR_MODULE.LR = 0.2  # pyright: ignore[reportAttributeAccessIssue]
    try:
        after = key(reads_module_attribute)
        assert after != before
        ATTR_MODULE.LR = 2  # pyright: ignore[reportAttributeAccessIssue]
        assert key(reads_module_attribute) != after
    finally:
        ATTR_MODULE.LR = 0.1  # pyright: ignore[reportAttributeAccessIssue]
    assert key(reads_module_attribute) == before
    # An attribute that is not there yet, then set: a new key.
    missing = key(reads_missing_attribute)
    ATTR_MODULE.LATER = None  # pyright: ignore[reportAttributeAccessIssue]
    try:
        assert key(reads_missing_attribute) != missing
    finally:
        del ATTR_MODULE.LATER  # pyright: ignore[reportAttributeAccessIssue]
    assert key(reads_missing_attribute) == missing


def reads_len(x):
    return x * len((1,))


def test_a_global_defined_later_shadows_the_builtin():
    before = key(reads_len)
    globals()["len"] = lambda t: 2
    try:
        assert key(reads_len) != before
    finally:
        del globals()["len"]
    assert key(reads_len) == before


class Aux:
    """A pytree node whose node data is a plain value, not a tuple."""

    def __init__(self, x, tag):
        self.x, self.tag = x, tag


jtu.register_pytree_node(Aux, lambda a: ((a.x,), a.tag), lambda tag, xs: Aux(xs[0], tag))


@pytest.mark.counts_traces
def test_node_data_that_is_not_a_tuple_compared_type_exactly():
    # `3`, `3.0` and `True`/`1` compare equal, so JAX's treedefs do too: the cache must not.
    traces = 0

    def f(a):
        nonlocal traces
        traces += 1
        return a.x * len(repr(a.tag)) * a.tag

    jitted = es.filter_jit(f)
    x = jnp.ones(1, jnp.int32)
    out = jitted(Aux(x, 3))
    assert out.dtype == jnp.int32 and out[0] == 3
    jitted(Aux(x, 3))
    assert traces == 1
    out = jitted(Aux(x, 3.0))
    assert out.dtype == jnp.float32 and out[0] == 9.0
    np.testing.assert_array_equal(jitted(Aux(x, 1)), [1])
    np.testing.assert_array_equal(jitted(Aux(x, True)), [4])
    assert traces == 4
    assert jitted(Aux(x, 3)).dtype == jnp.int32
    assert traces == 4


@pytest.mark.parametrize("position", [0, 1, 2])
def test_arrays_in_every_part_of_a_slice_are_watched(position):
    def make(a):
        parts: list[Any] = [0, 4, 1]
        parts[position] = a
        return slice(*parts)

    a = np.array(1)
    assert key(make(a)) != key(make(np.array(1)))
    assert key(make(a)).identity
    before = key(make(a))
    a[()] = 2
    assert key(make(a)) != before
    assert key(make((1, 2))) == key(make((1, 2)))


def test_builtin_methods_of_arrays_by_identity():
    a, b = np.ones(2), np.ones(2)
    assert key(a.sum) != key(b.sum)
    assert key(a.sum).identity


class UserBase:
    scale = 1.0


def make_class():
    class Made:
        x = 1

    return Made


def test_classes_by_identity_and_every_user_base():
    import json

    # Two classes with the same body are two classes (`isinstance` tells them apart).
    assert key(make_class()) != key(make_class())

    class Mixed(json.JSONEncoder, UserBase):  # a library class before a user base
        pass

    f = (lambda c: lambda: c)(Mixed)
    before = key(f)
    UserBase.scale = 2.0
    try:
        assert key(f) != before
    finally:
        UserBase.scale = 1.0
    # A class attribute holding an array is the user's array: by identity.
    holder = type("Holder", (), {"table": np.ones(2)})
    assert key((lambda c: lambda: c)(holder)).identity
    # Library classes and modules are themselves, each.
    assert key(np.ndarray) != key(np.generic)
    assert key(np) != key(jax)


class SlotsWithWeakref:
    __slots__ = ("v", "__weakref__")


def test_objects_with_slots():
    s = SlotsWithWeakref()
    first = key(s)
    assert key(s) == first  # A weak reference made to it (by the memo) is no change.
    s.v = None  # An unset slot, now set (to `None`): a change.
    assert key(s) != first
    t1, t2 = type("T", (tuple,), {})([1]), type("T", (tuple,), {})([1])
    t1.tag = t2.tag = (1, 2)  # pyright: ignore[reportAttributeAccessIssue]
    assert key(t1) != key(t2)  # two classes
    T = type("T", (tuple,), {})
    u1, u2 = T([1]), T([1])
    u1.tag, u2.tag = (1, 2), (1, 2)  # pyright: ignore[reportAttributeAccessIssue]
    assert key(u1) == key(u2)
    u2.tag = (1, 3)  # pyright: ignore[reportAttributeAccessIssue]
    assert key(u1) != key(u2)


class CallableTuple(NamedTuple):
    """A callable NamedTuple: it can stand where a function does, holding an array."""

    a: Any

    def __call__(self, x):
        return x * self.a


@pytest.mark.parametrize(
    "wrap",
    [
        lambda c: ft.partial(c, 1.0),
        # Not `jax.jit(c)`: building a `jax.jit` of a NamedTuple instance crashed the process
        # (a segfault inside JAX's `_cpp_pjit`, jax 0.10.2) in one run out of three.
        lambda c: types.MethodType(c, 1.0),
    ],
    ids=["partial", "method"],
)
def test_arrays_in_a_callable_tuple_where_a_function_goes(wrap):
    a = np.ones(2)
    assert key(wrap(CallableTuple(a))) != key(wrap(CallableTuple(a.copy())))
    assert key(wrap(CallableTuple(a))).identity


def test_class_attributes_that_look_like_dunders():
    class K:
        __len__ = len  # a builtin as a dunder method
        x__ = 1
        lr = 0.1

    f = (lambda c: lambda: c)(K)
    before = key(f)
    K.lr = 0.2
    assert key(f) != before
    after = key(f)
    K.x__ = 2
    assert key(f) != after


def test_frozensets_of_tuples_and_subclasses():
    assert key(frozenset([(1, 2)])) == key(frozenset([(1, 2)]))
    FS = type("FS", (frozenset,), {})
    assert key(FS([1])) != key(frozenset([1]))
    s1, s2 = FS([1]), FS([1])
    s1.tag, s2.tag = (1, 2), (1, 2)  # pyright: ignore[reportAttributeAccessIssue]
    assert key(s1) == key(s2)


def test_module_attributes_only_those_read():
    before = key(reads_module_attribute)
    ATTR_MODULE.UNRELATED = 1  # pyright: ignore[reportAttributeAccessIssue]
    try:
        assert key(reads_module_attribute) == before
        ATTR_MODULE.LR = (0.1, 0.2)  # pyright: ignore[reportAttributeAccessIssue]
        tupled = key(reads_module_attribute)
        assert key(types.FunctionType(reads_module_attribute.__code__, globals())) == tupled
        ATTR_MODULE.LR = np.ones(1)  # pyright: ignore[reportAttributeAccessIssue]
        assert key(reads_module_attribute).identity
    finally:
        ATTR_MODULE.LR = 0.1  # pyright: ignore[reportAttributeAccessIssue]
        del ATTR_MODULE.UNRELATED  # pyright: ignore[reportAttributeAccessIssue]


def make_reader_of_an_undefined_name():
    return lambda: never_defined  # noqa: F821  # pyright: ignore[reportUndefinedVariable]


def test_a_function_reading_an_undefined_name():
    assert key(make_reader_of_an_undefined_name()) == key(make_reader_of_an_undefined_name())


def test_intern_never_substitutes_namedtuples_holding_arrays():
    # The user's array is theirs to change, and a copy would not `==` their tuple (11c-03).
    a = np.ones(2)
    held = Holder(a)
    assert es.intern(held) is held
    assert es.stable_key(held) == es.stable_key(Holder(np.ones(2)))


class _SameHash:
    """Equal by value, with one hash for all: only `==` tells two apart."""

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return type(other) is _SameHash and self.v == other.v

    def __hash__(self):
        return 1


class _Plain:
    pass


class _HoldsAPlainObject:
    def __init__(self, held):
        self.held = held

    def __eq__(self, other):
        return type(other) is _HoldsAPlainObject and self.held is other.held

    def __hash__(self):
        return 7


class _Unhashable:
    def __eq__(self, other):
        return True

    def __hash__(self):
        raise TypeError("unhashable after all")


# Hashable objects whose state cannot be keyed by value fall back, each way, to something that
# never shares a key it should not.
def test_hashable_objects_that_cannot_be_keyed_by_value():
    # A library object that cannot be pickled (a weak reference): its own `==`, which compares
    # the referents even where their hashes agree.
    # A weak reference is itself, never its referent's `==`.
    one, two, again = _SameHash(1), _SameHash(2), _SameHash(1)
    assert es.stable_key(weakref.ref(one)) != es.stable_key(weakref.ref(two))
    assert es.stable_key(weakref.ref(one)) != es.stable_key(weakref.ref(again))
    # A user object with its own `==`: that `==` and its attributes (here one object, keyed by
    # identity); never substituted.
    held = _Plain()
    a, b = _HoldsAPlainObject(held), _HoldsAPlainObject(held)
    assert a == b and es.stable_key(a) == es.stable_key(b)
    assert es.intern(b) is b
    assert es.stable_key(a) != es.stable_key(_HoldsAPlainObject(_Plain()))
    # One whose hash raises: by identity.
    assert es.stable_key(_Unhashable()) != es.stable_key(_Unhashable())


def _closure_over(held):
    return lambda x: (x, held)


@pytest.mark.parametrize(
    ("wrap", "inner", "change"),
    [
        (lambda a: [a], np.array([1.0, 2.0]), lambda a: a.__iadd__(1.0)),
        (lambda a: {"w": a}, np.array([1.0, 2.0]), lambda a: a.__iadd__(1.0)),
        (lambda a: collections.deque([a]), [1.0], lambda a: a.append(2.0)),
        (lambda a: collections.deque([a]), np.array([1.0]), lambda a: a.__iadd__(1.0)),
        (lambda a: types.MappingProxyType({"w": a}), [1.0], lambda a: a.append(2.0)),
        (lambda a: types.MappingProxyType({"w": a}), np.array([1.0]), lambda a: a.__iadd__(1.0)),
    ],
    ids=["list-array", "dict-array", "deque-list", "deque-array", "proxy-list", "proxy-array"],
)
def test_what_a_container_holds_is_watched(wrap, inner, change):
    # A changeable thing inside a container a function reaches, changed in place: another key
    # (the container is the same object, and so is what it holds).
    f = _closure_over(wrap(inner))
    before = es.stable_key(f)
    change(inner)
    assert es.stable_key(f) != before
