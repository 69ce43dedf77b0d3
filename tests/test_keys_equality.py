"""Keys by a class's own equality (`eqxstable/_keys/README.md`, `K-own-eq`): an object whose
class defines `==` is keyed by that `==` and its attributes, type-exactly, and never substituted
by `intern` or `StableModule`; a dataclass by the equality it declares (`eq=False`: identity;
value equality: fields, substituted); containers of allowlisted values stay substitutable."""

import dataclasses
from typing import Any, NamedTuple

import equinox as eqx
import jax.numpy as jnp
import pytest
from hypothesis import given, strategies as st

import eqxstable as es

from .helpers import AlwaysEqual
from .keys_support import key


class Sink:
    """Hashable by name, each holding a list of its own (an ensemble member's log)."""

    def __init__(self, name):
        self.name = name
        self.items = []

    def __eq__(self, other):
        return type(other) is Sink and other.name == self.name

    def __hash__(self):
        return hash(self.name)


class LeavesOut:
    """Its `__getstate__` leaves `scale` out; its `==` compares `scale`."""

    def __init__(self, scale):
        self.scale = scale

    def __eq__(self, other):
        return type(other) is LeavesOut and other.scale == self.scale

    def __hash__(self):
        return 0

    def __getstate__(self):
        return {}


class SubSink(Sink):
    pass


def test_own_eq_is_its_own_eq_type_exactly_never_substituted():
    sinks = [Sink("loss") for _ in range(3)]
    # Its `==`, and (a further condition) its attributes: each holds a list of its own.
    assert key(sinks[0]) != key(sinks[1])
    assert key(sinks[0]) != key(SubSink("loss")) and key(sinks[0]) != key(Sink("acc"))
    shared: list = []
    a, b = Sink("loss"), Sink("loss")
    a.items = b.items = shared
    assert key(a) == key(b) and es.intern(b) is b
    assert [es.intern(s) for s in sinks] == sinks
    assert all(es.intern(s) is s for s in sinks)
    # Nor through a closure or a tuple holding one.
    closures = [(lambda s: lambda x: (s.items.append(1), x)[1])(s) for s in sinks]
    assert all(es.intern(c) is c for c in closures)
    assert all(es.intern((s, 1))[0] is s for s in sinks)
    # A guessed state is never the key: unequal objects are never equivalent.
    assert key(LeavesOut(1.0)) != key(LeavesOut(2.0))


def test_sinks_stay_apart_in_a_stable_module():
    class Member(es.StableModule):
        sink: Any = eqx.field(static=True)
        fn: Any

    members = [Member(Sink("loss"), (lambda s: lambda: s)(Sink("loss"))) for _ in range(3)]
    for m in members:
        m.sink.items.append(1)
    assert [len(m.sink.items) for m in members] == [1, 1, 1]
    assert len({id(m.fn()) for m in members}) == 3
    trees = [es.stabilize({"s": Sink("loss")}) for _ in range(3)]
    assert len({id(t["s"]) for t in trees}) == 3


@pytest.mark.counts_traces
def test_own_eq_never_shares_a_program_between_different_states():
    f = es.filter_jit(lambda g, x: g(x))
    assert float(f(AlwaysEqual(2.0), jnp.float32(1))) == 2.0
    assert float(f(AlwaysEqual(3.0), jnp.float32(1))) == 3.0


@dataclasses.dataclass(frozen=True, eq=False)
class Handle:
    value: Any


@dataclasses.dataclass(frozen=True)
class Point:
    x: Any


@dataclasses.dataclass(frozen=True, slots=True)
class SlotPoint:
    x: Any


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class SlotHandle:
    x: Any


@dataclasses.dataclass(frozen=True)
class ByName:
    name: str
    scale: float

    def __eq__(self, other):
        return type(other) is ByName and other.name == self.name

    def __hash__(self):
        return hash(self.name)


def test_dataclasses_by_their_equality():
    # `eq=False`: identity is its equality.
    for make in (Handle, SlotHandle):
        a, b = make(1.0), make(1.0)
        assert key(a) != key(b) and es.intern(b) is b
    # Value equality: fields, substituted.
    for make in (Point, SlotPoint):
        a, b = make(1.0), make(1.0)
        assert key(a) == key(b) and es.intern(b) is es.intern(a)
        assert key(make(1.0)) != key(make(1))
    # An `__eq__` of its own: that `==` (and its fields), never substituted.
    c, d = ByName("a", 1.0), ByName("a", 1.0)
    assert key(c) == key(d) and es.intern(d) is d
    assert key(c) != key(ByName("a", 2.0))


@pytest.mark.counts_traces
def test_zoo_frozen_eq_false_handles_keep_their_table_entries():
    table = {}
    first, second = Handle(1.0), Handle(1.0)
    table[first] = 100.0
    f = es.filter_jit(lambda h, x: x * (h.value + table.get(h, 0.0)))
    assert float(f(first, jnp.ones(()))) == 101.0
    assert float(f(second, jnp.ones(()))) == 1.0
    assert es.intern(second) is second


class Pair(NamedTuple):
    a: Any
    b: Any


@given(
    st.one_of(
        st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.booleans(), st.none()
    ),
)
def test_allowlisted_containers_of_values_stay_substitutable(v):
    for make in (lambda: (v, v), lambda: Pair(v, (v,)), lambda: Point((v,))):
        a, b = make(), make()
        assert key(a) == key(b) and key(a).substitutable and es.intern(b) is es.intern(a)


def test_own_canonical_forms_by_value():
    # eqxstable's own frozen dataclasses (`K-frozen-dataclass`): the node data of a `filter_jit`
    # wrapper (its function's static part and its options), compared by value, so that wrappers
    # of equivalent functions have equal structures.
    def make(scale):
        return lambda x: x * scale

    a, b = es.filter_jit(make(2.0))._aux, es.filter_jit(make(2.0))._aux
    assert a is not b and key(a) == key(b) and key(a).substitutable
    assert key(a) != key(es.filter_jit(make(2))._aux)
    assert key(a) != key(es.filter_jit(make(2.0), donate="all")._aux)
