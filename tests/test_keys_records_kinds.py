"""Tables of NamedTuple records and of `slots=True` frozen dataclass records past the object
budget (attack 13a-02): keyed by identity, their classes and what each record holds
(`_keys/_records.py`: a NamedTuple's items cannot change, only its class; a slots record's slot
values are watched by `is`), so the same function hits; a record written with
`object.__setattr__`, given another class, or holding a mutable item is seen, and the answer
matches eager Python."""

import dataclasses
import sys
import typing

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import _context
from eqxstable._keys._records import frozen_records

from .helpers import python_calls


class Pt(typing.NamedTuple):
    a: float
    b: float


class PtOther(typing.NamedTuple):
    a: float
    b: float


class PtDict(Pt):  # No `__slots__ = ()`: a `__dict__`.
    pass


class PtGet(typing.NamedTuple):
    a: float
    b: float

    def __getitem__(self, i):  # type: ignore[override]
        return tuple.__getitem__(self, i) * 2


@dataclasses.dataclass(frozen=True, slots=True)
class Sl:
    a: float
    b: float


@dataclasses.dataclass(frozen=True, slots=True)
class SlOther:
    a: float
    b: float


# A `__weakref__` slot too, where `dataclasses` makes one (Python 3.11 on).
_WEAK: dict[str, typing.Any] = {"weakref_slot": True} if sys.version_info >= (3, 11) else {}


@dataclasses.dataclass(frozen=True, slots=True, **_WEAK)
class SlWeak:
    a: float
    b: float


@dataclasses.dataclass(frozen=True)
class Plain:
    a: float
    b: float


def test_which_records_are_taken():
    assert frozen_records((Pt(1.0, 2.0),) * 3) is not None
    assert frozen_records((Sl(1.0, 2.0), SlWeak(1.0, 2.0))) is not None
    assert frozen_records((Pt(1.0, 2.0), Sl(1.0, 2.0), Plain(1.0, 2.0), 3)) is not None
    assert frozen_records((PtDict(1.0, 2.0),)) is None  # A `__dict__`: could change.
    assert frozen_records((Pt(1.0, [2.0]),)) is None  # type: ignore[arg-type]
    assert frozen_records((Sl(1.0, [2.0]),)) is None  # type: ignore[arg-type]
    assert frozen_records((Pt(1.0, 2.0), Sl(1.0, [2.0]))) is None  # type: ignore[arg-type]


_KINDS = ["namedtuple", "namedtuple getitem", "slots", "slots weakref", "mixed"]
_CHANGES = ["none", "setattr", "setattr same", "class", "mutable item"]


def _make(kind: str, n: int) -> tuple:
    if kind == "namedtuple":
        return tuple(Pt(float(i), float(i % 7)) for i in range(n))
    if kind == "namedtuple getitem":
        return tuple(PtGet(float(i), float(i % 7)) for i in range(n))
    if kind == "slots":
        return tuple(Sl(float(i), float(i % 7)) for i in range(n))
    if kind == "slots weakref":
        return tuple(SlWeak(float(i), float(i % 7)) for i in range(n))
    kinds = (Pt, Sl, Plain)
    return tuple(kinds[i % 3](float(i), float(i % 7)) for i in range(n))


def _read(table: tuple, where: int) -> float:
    r = table[where]
    return (
        r.b
        + (r[1] if isinstance(r, tuple) else 0.0)
        + (10.0 if type(r) in (PtOther, SlOther) else 0.0)
    )


def _change(table: tuple, where: int, change: str) -> bool:
    """Changes `table[where]` where it can; whether it did."""
    r = table[where]
    if change == "none":
        return False
    if isinstance(r, tuple):
        if change == "class" and type(r) is Pt:
            r.__class__ = PtOther  # type: ignore[assignment]
            return True
        return False  # A NamedTuple's items cannot be written.
    if change == "setattr":
        object.__setattr__(r, "b", r.b + 1.0)
    elif change == "setattr same":
        object.__setattr__(r, "b", r.b)
        return False
    elif change == "class":
        if type(r) is not Sl:
            return False
        object.__setattr__(r, "__class__", SlOther)
    elif change == "mutable item":
        object.__setattr__(r, "b", [1.0])
        object.__setattr__(r, "b", 5.0)  # Back to a scalar, another object.
    return True


@pytest.mark.counts_traces
@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(_KINDS), change=st.sampled_from(_CHANGES), where=st.integers(0, 2_999))
def test_a_table_past_the_budget_hits_and_sees_every_change(kind, change, where):
    old = _context.MAX_OBJECTS
    _context.MAX_OBJECTS = 2_000
    try:
        table = _make(kind, 3_000)
        traces = 0

        @es.filter_jit
        def f(x):
            nonlocal traces
            traces += 1
            return x * _read(table, where)

        x = jnp.ones(2)
        for _ in range(3):
            assert float(f(x)[0]) == _read(table, where)
        # Hits past the budget (a key equal to nothing before: no hit ever).
        assert traces == 1 and f.cache_info().hits == 2
        changed = _change(table, where, change)
        out = f(x)
        assert float(out[0]) == _read(table, where)
        if not changed:
            assert traces == 1
    finally:
        _context.MAX_OBJECTS = old


@pytest.mark.counts_traces
def test_a_mutable_item_makes_no_records_and_stays_correct():
    old = _context.MAX_OBJECTS
    _context.MAX_OBJECTS = 2_000
    try:
        holder = [1.0]
        table = tuple(Pt(float(i), 1.0) for i in range(3_000)) + (Pt(0.0, holder),)  # type: ignore[arg-type]

        @es.filter_jit
        def f(x):
            return x * table[-1].b[0]  # type: ignore[index]

        x = jnp.ones(2)
        assert float(f(x)[0]) == 1.0
        holder[0] = 4.0
        assert float(f(x)[0]) == 4.0
    finally:
        _context.MAX_OBJECTS = old


@pytest.mark.counts_traces
def test_a_records_class_changed_after_keying_is_seen():
    class Q(typing.NamedTuple):
        a: float
        b: float

    old = _context.MAX_OBJECTS
    _context.MAX_OBJECTS = 2_000
    try:
        table = tuple(Q(float(i), float(i)) for i in range(3_000))
        f = es.filter_jit(lambda x: x * table[5].b)
        x = jnp.ones(2)
        assert float(f(x)[0]) == 5.0 and float(f(x)[0]) == 5.0
        assert f.cache_info().hits == 1
        Q.__getattribute__ = lambda self, n: 7.0 if n == "b" else tuple.__getattribute__(self, n)  # type: ignore[method-assign]
        assert float(f(x)[0]) == 7.0
    finally:
        _context.MAX_OBJECTS = old


def _dag(leaf: object, depth: int) -> tuple:
    # `t = (t, t)` `depth` deep: `depth + 1` tuples, 2 ** depth paths to `leaf`.
    t = (leaf,)
    for _ in range(depth):
        t = (t, t)
    return t


@pytest.mark.parametrize("leaf", [Sl(1.0, 2.0), Pt(1.0, 2.0), 1.5], ids=["slots", "tuple", "float"])
def test_a_shared_tuple_is_scanned_once_however_many_paths_reach_it(leaf):
    # Attack round 14c, findings 01, 02, 04, 05: each level was expanded by occurrence, 2 ** 20
    # records (or floats) for one, at every rebuilt reader and every hit.
    table = (_dag(leaf, 20),) * 1_024
    calls = python_calls(lambda: frozen_records(table))
    assert calls < 200
    assert frozen_records(table) == (None if type(leaf) is float else [leaf])


@pytest.mark.counts_traces
def test_a_reader_of_a_shared_tuple_of_records_hits(monkeypatch):
    table = (_dag(Sl(1.0, 2.0), 16),) * 1_024
    traces = 0

    def f(v):
        nonlocal traces
        traces += 1
        t: typing.Any = table
        while type(t) is tuple:
            t = t[0]
        return v * t.a

    run = es.filter_jit(f)
    for _ in range(3):
        assert float(run(jnp.float32(2.0))) == 2.0
    assert traces == 1 and run.cache_info().hits == 2
    hit = python_calls(lambda: run(jnp.float32(2.0)))
    assert hit < 500


class PtDoubled(typing.NamedTuple):
    a: float
    b: float

    @property
    def doubled(self) -> float:
        return 999.0


class PtPlainDoubled(typing.NamedTuple):
    a: float
    b: float

    @property
    def doubled(self) -> float:
        return self.a


_BIG_TABLE = 1_500  # At least `_records.MEMO_MIN`: keyed on its own and remembered.


@pytest.mark.parametrize("kind", ["slots", "class"])
def test_a_remembered_table_sees_its_records_change(kind):
    # Attack round 14c, findings 06 and 07: a table of at least 1,024 slots or NamedTuple
    # records, keyed on its own and remembered, kept no state of its records: a slot written
    # past the frozen `__setattr__`, or a record given another class, reused the old program.
    if kind == "slots":
        table = tuple(Sl(float(i), 0.0) for i in range(_BIG_TABLE))

        def read(r):
            return r.a

    else:
        table = tuple(PtPlainDoubled(float(i), 0.0) for i in range(_BIG_TABLE))

        def read(r):
            return r.doubled

    def f(x, k):
        return x * read(table[k])

    run = es.filter_jit(f)
    x = jnp.float32(1.0)
    assert float(run(x, 5)) == 5.0
    if kind == "slots":
        object.__setattr__(table[5], "a", -1.0)
    else:
        table[5].__class__ = PtDoubled  # pyright: ignore[reportAttributeAccessIssue]
    assert float(run(x, 5)) == f(1.0, 5)
    # A rebuilt reader of the changed table too.
    assert float(es.filter_jit(lambda x, k: x * read(table[k]))(x, 5)) == f(1.0, 5)
