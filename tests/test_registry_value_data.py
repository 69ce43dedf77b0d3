"""`intern` never substitutes a value that holds data of its own which its owner may change later
(attack round 8a, findings 16 and 17), as it never substitutes a function with `f.scale`: a
NamedTuple subclass with `q.scale`, an `int`/`str` subclass with attributes, a frozen dataclass
with a non-field attribute, a function keeping data under a dunder name (`f.__scale__`). They
keep their value keys (the data keyed and watched). What `functools.wraps` sets does not count
as data: wrapped functions are still substituted. And a frozen dataclass whose C base holds
state its fields do not show (`collections.deque`, finding 01) is never joined by its fields."""

import collections
import dataclasses
import functools as ft
import typing

import equinox as eqx
import jax.numpy as jnp
import pytest

import eqxstable as es


class _Base(typing.NamedTuple):
    a: float


class Q(_Base):
    def __call__(self, x):
        return x * self.a * self.scale  # pyright: ignore


class Units(int):
    pass


class Name(str):
    pass


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: float

    def __call__(self, x):
        return x * self.a * self.extra  # pyright: ignore


def _q(v):
    q = Q(1.0)
    q.scale = v  # pyright: ignore
    return q


def _units(v):
    u = Units(4)
    u.factor = v  # pyright: ignore
    return u


def _name(v):
    n = Name("relu")
    n.factor = v  # pyright: ignore
    return n


def _frozen(v):
    f = Frozen(1.0)
    object.__setattr__(f, "extra", v)
    return f


def _set(attr):
    def set_(o, v):
        object.__setattr__(o, attr, v)

    return set_


# Each: a factory of the value holding `v`, how its data is changed, and how it is read.
_HOLDERS = {
    "namedtuple": (_q, _set("scale"), lambda o: o(1.0)),
    "int": (_units, _set("factor"), lambda o: o * o.factor),
    "str": (_name, _set("factor"), lambda o: len(o) * o.factor),
    "frozen_dataclass": (_frozen, _set("extra"), lambda o: o(1.0)),
}


@pytest.mark.parametrize("kind", sorted(_HOLDERS))
def test_values_holding_data_are_never_substituted(kind):
    make, change, read = _HOLDERS[kind]
    first, twin = make(1.0), make(1.0)
    # Value keys still: equal data, equal keys; other data, another key.
    assert es.stable_key(first) == es.stable_key(twin)
    assert es.stable_key(first) != es.stable_key(make(2.0))
    assert es.intern(first) is first
    got = es.intern(twin)
    assert got is twin
    change(first, 3.0)
    assert read(got) == read(twin)


@pytest.mark.parametrize("kind", sorted(_HOLDERS))
def test_differential_after_the_first_owner_changes_its_data(kind):
    # Eager Python, a stabilized module under plain `eqx.filter_jit`, and `es.filter_jit`.
    make, change, read = _HOLDERS[kind]

    class Holder(eqx.Module):
        v: typing.Any = eqx.field(static=True)

        def __call__(self, x):
            return x * read(self.v)

    x = jnp.float32(1.0)
    first, twin = make(1.0), make(1.0)
    jitted = eqx.filter_jit(lambda m, x: m(x))
    assert float(jitted(es.stabilize(Holder(first)), x)) == 1.0 * read(first)
    m = es.stabilize(Holder(twin))
    change(first, 3.0)
    want = float(Holder(twin)(x))
    assert float(m(x)) == want
    # Closed over (a NamedTuple passed as an argument is a pytree, rebuilt without its dict).
    assert float(es.filter_jit(_reader(twin, read))(x)) == want


def _reader(v, read):
    return lambda x: x * read(v)


class _SlotlessQ(_Base):
    __slots__ = ()


class _SlotlessUnits(int):
    __slots__ = ()


def test_plain_values_are_still_substituted():
    assert es.intern(_Base(1.0)) is es.intern(_Base(1.0))
    # A subclass whose instances cannot take attributes later.
    assert es.intern(_SlotlessQ(1.0)) is es.intern(_SlotlessQ(1.0))
    assert es.intern(_SlotlessUnits(4)) is es.intern(_SlotlessUnits(4))
    # Its `__dict__` is empty, but `q.scale = 3.0` may come after `intern` (`Q.__call__` reads
    # it): equal keys, never substituted (tests/test_registry_self_reference.py).
    q1, q2 = Q(1.0), Q(1.0)
    assert es.stable_key(q1) == es.stable_key(q2)
    assert es.intern(q1) is q1 and es.intern(q2) is q2
    u1, u2 = Units(4), Units(4)
    assert es.stable_key(u1) == es.stable_key(u2)
    assert es.intern(u1) is u1 and es.intern(u2) is u2
    f = Frozen(1.0)
    assert es.intern(Frozen(1.0)) is es.intern(f)


def _dunder_data(v):
    def act(x):
        return x * act.__scale__  # pyright: ignore

    act.__scale__ = v  # pyright: ignore
    return act


def test_function_keeping_data_under_a_dunder_name_is_never_substituted():
    f1, f2 = _dunder_data(1.0), _dunder_data(1.0)
    assert es.stable_key(f1) == es.stable_key(f2)
    g1, g2 = es.intern(f1), es.intern(f2)
    assert g1 is f1 and g2 is f2
    f1.__scale__ = 3.0  # pyright: ignore
    x = jnp.float32(1.0)
    assert float(g2(x)) == float(f2(x)) == 1.0


def _wrapped(scale):
    def inner(x):
        return x * scale

    @ft.wraps(inner)
    def outer(x):
        return inner(x)

    return outer


def test_what_wraps_sets_is_not_data():
    # `__wrapped__` in the function's `__dict__`; a partial gets every name wraps assigns.
    assert es.intern(_wrapped(2.0)) is es.intern(_wrapped(2.0))
    assert es.intern(_wrapped(2.0)) is not es.intern(_wrapped(3.0))

    def partial_of(scale):
        p = ft.partial(jnp.multiply, scale)
        ft.update_wrapper(p, _wrapped(scale))
        return p

    # Equivalent, though never substituted: a partial can change in place (its keywords dict).
    assert es.stable_key(partial_of(2.0)) == es.stable_key(partial_of(2.0))

    # The exact name, holding what wraps copies there; anything else is data.
    def odd():
        p = ft.partial(jnp.multiply, 2.0)
        p.__name__ = 3.0  # pyright: ignore
        return p

    assert es.intern(odd()) is not es.intern(odd())


@dataclasses.dataclass(frozen=True)
class Taps(collections.deque):
    scale: float = 1.0

    def __call__(self, x):
        return x * self.scale * len(self)


def _taps(n):
    t = Taps(1.0)
    t.extend(range(n))
    return t


def test_frozen_dataclass_with_a_c_base_is_not_joined_by_its_fields():
    a, b = _taps(2), _taps(5)
    assert es.stable_key(a) != es.stable_key(b)
    es.intern(a)
    assert es.intern(b) is b

    class M(eqx.Module):
        f: typing.Any

        def __call__(self, x):
            return self.f(x)

    x = jnp.float32(1.0)
    # A fresh `eqx.filter_jit` each (one would join the two by their `==` itself, with or
    # without eqxstable); one `es.filter_jit` for both.
    assert float(eqx.filter_jit(lambda m, x: m(x))(es.stabilize(M(a)), x)) == 2.0
    assert float(eqx.filter_jit(lambda m, x: m(x))(es.stabilize(M(b)), x)) == 5.0
    jf = es.filter_jit(lambda t, x: t(x))
    assert float(jf(a, x)) == 2.0
    assert float(jf(b, x)) == float(b(x)) == 5.0
