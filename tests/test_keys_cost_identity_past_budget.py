"""A global tuple of frozen dataclass records (attack 12a-10): past the object budget it is keyed by
its identity, its records' classes and what each record holds by `is` (`_keys/_records.py`), so
the same function hits (0 hits in 4 calls before) and a rebuilt reader over the same tuple does
too; a big one under the budget is keyed once and remembered for rebuilt readers, its records
watched as one state read in C. A record written past its frozen `__setattr__` still retraces and
matches eager."""

import dataclasses

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import _context, _records, compute
from eqxstable._keys._records import frozen_records, records_state
from eqxstable._keys._state import attrs_state

from .helpers import python_calls


@dataclasses.dataclass(frozen=True)
class Rec:
    a: int
    b: float
    c: str


@dataclasses.dataclass(frozen=True)
class Other:
    a: int
    b: float
    c: str


@dataclasses.dataclass(frozen=True)
class Holds:
    items: list


def test_which_tuples_hold_frozen_records():
    assert frozen_records((Rec(1, 1.0, "a"), 3, ("x", (Rec(2, 2.0, "b"),)))) is not None
    found = frozen_records((Rec(1, 1.0, "a"), (Rec(2, 2.0, "b"),)))
    assert found is not None and len(found) == 2
    assert frozen_records((1, 2, 3)) is None  # No record: `frozen_scalars`'s.
    assert frozen_records([Rec(1, 1.0, "a")]) is None  # A list can change.
    assert frozen_records((Holds([1]),)) is None  # A record holding a list.
    assert frozen_records((Rec(1, 1.0, [2]),)) is None  # type: ignore[arg-type]


# The index the readers below read at, as a global: `table[THREE]` reads the table whole (a
# constant index, `table[3]`, would key that record alone: `K-const-subscript`,
# `tests/test_keys_const_subscript.py`), which these tests of the records' path need.
THREE = 3


def _reader(table: tuple):
    return lambda: table[THREE].b


def _table(n: int, cls=Rec) -> tuple:
    return tuple(cls(i, float(i), str(i)) for i in range(n))


@pytest.mark.counts_traces
def test_past_the_budget_the_same_function_hits_and_a_write_retraces(small_budget):
    table = _table(5_000)
    traces = 0

    def read(x):
        nonlocal traces
        traces += 1
        return x * table[THREE].b

    f = es.filter_jit(read)
    x = jnp.ones(2)
    for _ in range(4):
        assert float(f(x)[0]) == 3.0
    assert traces == 1 and f.cache_info().hits == 3
    # A rebuilt reader over the same tuple object hits too (no walk of it, no trace).
    run = es.filter_jit(lambda h, x: h(x))
    for _ in range(3):
        assert float(run(lambda x: x * table[THREE].b, x)[0]) == 3.0
    assert run.cache_info().misses == 1
    # Written past its frozen `__setattr__`: seen, retraced, the eager answer.
    object.__setattr__(table[3], "b", 9.0)
    assert float(f(x)[0]) == 9.0 and traces == 2
    assert "past the budget" in f.explain() and "identity" in f.explain()
    table[3].__dict__["b"] = 4.0
    assert float(f(x)[0]) == 4.0 and traces == 3
    object.__setattr__(table[3], "__class__", Other)
    assert float(f(x)[0]) == 4.0 and traces == 4


def test_past_the_budget_the_class_is_watched(small_budget):
    table = _table(5_000)
    f = es.filter_jit(lambda x: x * table[THREE].scaled)
    Rec.scaled = property(lambda self: self.b * 2)  # type: ignore[attr-defined]
    try:
        x = jnp.ones(2)
        assert float(f(x)[0]) == 6.0
        Rec.scaled = property(lambda self: self.b * 3)  # type: ignore[attr-defined]
        assert float(f(x)[0]) == 9.0
    finally:
        del Rec.scaled  # type: ignore[attr-defined]


def test_past_the_budget_an_equal_rebuilt_tuple_is_another_key(small_budget):
    a, b = _table(5_000), _table(5_000)
    ka, kb = compute(_reader(a))[0], compute(_reader(b))[0]
    assert ka != kb  # A missed equivalence at most: never an equal key for other objects.
    assert compute(_reader(a))[0] == ka


def test_a_big_table_under_the_budget_is_one_state_and_remembered():
    table = _table(3_000)
    key, watch = compute(_reader(table))
    fns = [s[1] for s in watch.states]
    assert records_state in fns and attrs_state not in fns
    # A rebuilt reader reuses the remembered key: no walk of 3,000 records.
    assert python_calls(lambda: compute(_table(10)), "frozen_dataclass") == 10
    assert python_calls(lambda: compute(_reader(table)), "frozen_dataclass") == 0
    assert compute(_reader(table))[0] == key
    # Under the budget it is keyed by value: an equal rebuilt table is the same key.
    assert compute(_reader(_table(3_000)))[0] == key


@pytest.mark.counts_traces
def test_a_hit_over_many_records_is_not_a_call_per_record():
    table = _table(3_000)
    f = es.filter_jit(lambda x: x * table[THREE].b)
    x = jnp.ones(2)
    f(x)
    assert python_calls(lambda: f(x)) < 200
    assert f.cache_info().hits == 1


_CHANGES = ["none", "same value", "equal float", "negative zero", "int for float", "add", "delete"]


@pytest.mark.counts_traces
@settings(max_examples=40, deadline=None)
@given(change=st.sampled_from(_CHANGES), where=st.integers(0, 2_999), past=st.booleans())
def test_a_change_to_any_record_is_seen_and_matches_eager(change, where, past):
    old = _context.MAX_OBJECTS
    _context.MAX_OBJECTS = 2_000 if past else old
    try:
        _check_change(change, where)
    finally:
        _context.MAX_OBJECTS = old


def _check_change(change: str, where: int) -> None:
    table = tuple(Rec(i, float(i % 7), str(i)) for i in range(3_000))
    traces = 0

    @es.filter_jit
    def f(x):
        nonlocal traces
        traces += 1
        return x * sum(r.b for r in table[where : where + 3]) + len(vars(table[where]))

    x = jnp.ones(2)
    f(x)
    r = table[where]
    if change == "same value":
        object.__setattr__(r, "b", r.b)
    elif change == "equal float":
        object.__setattr__(r, "b", float(str(r.b)))
    elif change == "negative zero":
        object.__setattr__(r, "b", -0.0 if str(r.b) == "0.0" else 0.0)
    elif change == "int for float":
        object.__setattr__(r, "b", int(r.b))
    elif change == "add":
        object.__setattr__(r, "extra", 1)
    elif change == "delete":
        object.__delattr__(r, "c")
    eager = x * sum(r.b for r in table[where : where + 3]) + len(vars(table[where]))
    out = f(x)
    assert jnp.array_equal(out, eager) and out.dtype == eager.dtype
    if change in ("none", "same value"):
        assert traces == 1


def test_the_records_memo_is_bounded():
    tables = [_table(1_100) for _ in range(_records.MEMO_SIZE + 4)]
    for t in tables:
        compute(lambda t=t: t)
    assert len(_records._memo) <= _records.MEMO_SIZE


@settings(max_examples=60, deadline=None)
@given(
    changes=st.lists(
        st.tuples(
            st.sampled_from(["set", "same", "add", "delete", "class", "dict"]),
            st.integers(0, 19),
            st.sampled_from([0, 1, 1.0, True, -0.0, 0.0, "1", None]),
        ),
        max_size=3,
    )
)
def test_the_check_in_place_is_the_state_compared(changes):
    # `_records_valid` (the hit path) answers exactly what comparing `records_state` by `is` does.
    table = tuple(Rec(i % 3, 0.0, "a") for i in range(20))
    held = _records.Records(list(table))
    state = records_state(held)
    for change, where, value in changes:
        r = table[where]
        if change == "set":
            object.__setattr__(r, "a", value)
        elif change == "same":
            object.__setattr__(r, "a", r.a)
        elif change == "add":
            object.__setattr__(r, "z", value)
        elif change == "delete" and "c" in vars(r):
            object.__delattr__(r, "c")
        elif change == "class":
            object.__setattr__(r, "__class__", Other)
        elif change == "dict":
            object.__setattr__(r, "__dict__", dict(vars(r)))
    now = records_state(held)
    same = len(now) == len(state) and all(map(lambda a, b: a is b, now, state))
    assert _records._records_valid(held, state) == same
