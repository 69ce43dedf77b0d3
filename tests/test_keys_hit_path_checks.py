"""The hit path's cheaper checks (attack 9a-03, 8b-10): many plain objects' states checked as one
(`_keys/_batch.py`), an exact list's or dict's state compared where it is (`Watch.valid`); each
passes exactly when the generic check would, and a change is still seen by the jit."""

import gc
import weakref
from typing import Any

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import _batch, compute
from eqxstable._keys._state import dict_state, list_state, object_state
from eqxstable._keys._watch import _unbatched, Batch, Watch

from .helpers import python_calls


class Record:
    def __init__(self, i):
        self.i = i
        self.label = float(i)


class Other:
    def __init__(self, i):
        self.i = i
        self.label = float(i)


class Slotted:
    __slots__ = ("i", "__dict__")

    def __init__(self, i):
        self.i = i


class LoudDict(dict):
    pass


def _batches(watch: Watch) -> list:
    return [s for s in watch.states if type(s[0]) is Batch]


def _batched_then_weak():
    records = [Record(i) for i in range(100)]
    _, watch = compute(lambda: records)
    (batch,) = _batches(watch)
    assert len(batch[0].objs) == 100
    # The memo's weak watch holds them one by one, weakly (it must not keep them alive).
    weak = watch.weak()
    assert not any(type(s[0]) is Batch for s in weak.states)
    held = [s[0] for s in weak.states if s[1] is object_state]
    assert len(held) == 100 and all(type(r) is weakref.ref for r in held)
    return held[0]


def test_plain_objects_are_one_batch_and_the_memo_holds_them_weakly():
    ref = _batched_then_weak()
    gc.collect()
    assert ref() is None


def test_few_or_slotted_objects_are_not_batched():
    few = [Record(i) for i in range(_batch._LEAST - 1)]
    assert not _batches(compute(lambda: few)[1])
    slotted = [Slotted(i) for i in range(100)]
    assert not _batches(compute(lambda: slotted)[1])


_NEED_LABEL = (
    "same value",
    "equal object",
    "negative zero",
    "delete attribute",
    "rename attribute",
)
_CHANGES = [
    "none",
    "same value",  # The very object again.
    "equal object",  # `float(i)` made again: equal, not the same object.
    "negative zero",
    "add attribute",
    "delete attribute",
    "rename attribute",
    "class",
    "dict subclass",
    "new dict, same items",
]


def _change(obj, change):
    if "label" not in obj.__dict__ and change in _NEED_LABEL:
        return
    if change == "same value":
        obj.label = obj.label
    elif change == "equal object":
        obj.label = float(str(obj.label))
    elif change == "negative zero":
        obj.label = -0.0 if obj.label == 0.0 and str(obj.label) == "0.0" else 0.0
    elif change == "add attribute":
        obj.extra = 1
    elif change == "delete attribute":
        del obj.label
    elif change == "rename attribute":
        obj.label2 = obj.__dict__.pop("label")
    elif change == "class":
        obj.__class__ = Other if type(obj) is Record else Record  # pyright: ignore[reportAttributeAccessIssue]
    elif change == "dict subclass":
        obj.__dict__ = LoudDict(obj.__dict__)
    elif change == "new dict, same items":
        obj.__dict__ = dict(obj.__dict__)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(_batch._LEAST, 80),
    st.lists(st.tuples(st.integers(0, 1000), st.sampled_from(_CHANGES)), max_size=4),
    st.booleans(),
)
def test_a_batch_passes_exactly_when_each_object_would(n, changes, mixed):
    objs = [(Other if mixed and i % 3 == 0 else Record)(i) for i in range(n)]
    _, watch = compute(lambda: objs)
    assert _batches(watch)
    one_by_one = Watch(_unbatched(watch.states), watch.names, watch.blobs)
    for where, change in changes:
        _change(objs[where % n], change)
    expected = one_by_one.valid()
    if any(change == "dict subclass" for _, change in changes):
        # Stricter there (a `__dict__` that is not an exact `dict`: changed, keyed again), never
        # more lenient.
        assert not watch.valid() or expected
    else:
        assert watch.valid() == expected
    # And the memo's copy, made strong again (batched again where it can be), agrees.
    strong = watch.weak().strong()
    assert strong is not None and strong.valid() == expected


@pytest.mark.counts_traces
def test_a_change_to_one_record_retraces_and_matches_eager():
    records = [Record(i) for i in range(200)]
    traces = 0

    def total(x):
        nonlocal traces
        traces += 1
        return x + sum(r.label for r in records)

    f = es.filter_jit(total)
    x = jnp.float32(0.0)
    assert float(f(x)) == sum(range(200))
    assert float(f(x)) == sum(range(200)) and traces == 1
    records[150].label = 1000.0
    assert float(f(x)) == float(total(x)) == sum(range(200)) - 150 + 1000
    assert traces == 3  # The retrace and the eager call above.
    records[150].label = 150.0
    assert float(f(x)) == sum(range(200))


def test_a_hit_over_many_records_costs_less_than_one_check_each():
    records = [Record(i) for i in range(20_000)]
    _, watch = compute(lambda: records)
    one_by_one = Watch(_unbatched(watch.states), watch.names, watch.blobs)

    # Counted, not timed: a Python-level call per record is what a batch saves.
    valid = []
    assert python_calls(lambda: valid.append(one_by_one.valid())) >= len(records)
    assert python_calls(lambda: valid.append(watch.valid())) < 100
    assert all(valid) and len(valid) == 2


_ITEM_CHANGES = ["none", "same item", "equal item", "append", "pop", "swap", "negative zero"]


def _change_items(c: Any, change: str, where: int) -> None:
    keys = list(c) if type(c) is dict else list(range(len(c)))
    if not keys:
        return
    k = keys[where % len(keys)]
    if change == "same item":
        c[k] = c[k]
    elif change == "equal item":
        c[k] = float(str(c[k]))
    elif change == "negative zero":
        c[k] = -0.0 if str(c[k]) == "0.0" else 0.0
    elif change == "append":
        if isinstance(c, dict):
            c[object()] = 1.0
        else:
            c.append(1.0)
    elif change == "pop":
        c.pop(k)
    elif change == "swap" and len(keys) > 1:
        j = keys[(where + 1) % len(keys)]
        c[k], c[j] = c[j], c[k]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True), max_size=40),
    st.booleans(),
    st.lists(st.tuples(st.sampled_from(_ITEM_CHANGES), st.integers(0, 100)), max_size=3),
)
def test_a_list_or_dict_check_in_place_is_the_generic_check(items, as_dict, changes):
    c: Any = {i: v for i, v in enumerate(items)} if as_dict else list(items)
    fn: Any = dict_state if as_dict else list_state
    fast = Watch(((c, fn, fn(c)),))
    # The same check through a state function that is not `list_state`/`dict_state` itself.
    generic = Watch(((c, lambda o: fn(o), fn(c)),))
    assert fast.valid() and generic.valid()
    for change, where in changes:
        _change_items(c, change, where)
    assert fast.valid() == generic.valid()


@pytest.mark.parametrize("as_dict", [False, True])
def test_a_big_list_or_dict_is_checked_without_a_copy(as_dict):
    import tracemalloc

    n = 100_000
    c: Any = {i: float(i) for i in range(n)} if as_dict else [float(i) for i in range(n)]
    _, watch = compute(lambda: c[3])
    tracemalloc.start()
    try:
        assert watch.valid()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The tuple of every item (and key) that `list_state`/`dict_state` builds: 8 bytes each.
    assert peak < 8 * n // 10
