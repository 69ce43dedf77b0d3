"""A big table held by a class (`Vocab.TABLE = {word: [ids]}`) is keyed with the machinery a
global's has (`K-user-class`, `_class_entries.BIG`): the run of scalars, the object budget
(identity past it, with a reason), the watch of a held container compared in C. Attack round
11a, finding 09: a 100,000-entry class table read for one item cost 200 ms a hit and 3 s a
rebuilt reader, keyed item by item with a watch state per entry."""

from itertools import chain

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import compute, too_many_objects
from eqxstable._keys._frozen import _items, _nested_state
from eqxstable._keys._watch import size


# Past a budget of 2,000 objects (the `small_budget` fixture), as past the real one.
_N = 2_010


def _vocab():
    class Vocab:
        TABLE = {f"w{i}": [i, i + 1] for i in range(_N)}

    return Vocab


@pytest.mark.usefixtures("small_budget")
def test_a_class_table_past_the_budget_is_held_not_walked():
    Vocab = _vocab()
    key, watch = compute(Vocab)
    assert not too_many_objects(key)
    # One state for the table (its items and theirs, compared by `is`), not one per entry.
    assert len(watch.states) < 50
    assert watch.valid()
    assert key == compute(Vocab)[0]
    # `Key.identity` says what it said for the class before: the table is pinned by it.
    assert key.identity == compute(type("Small", (), {"TABLE": {"w0": [0, 1]}}))[0].identity
    Vocab.TABLE["w5"][0] = 50
    assert not watch.valid()
    assert compute(Vocab)[0] != key


@pytest.mark.counts_traces
@pytest.mark.usefixtures("small_budget")
def test_a_reader_of_a_class_table_hits_until_it_changes():
    Vocab = _vocab()
    traces = 0

    def run(fn, x):
        nonlocal traces
        traces += 1
        return fn(x)

    jitted = es.filter_jit(run)
    make = lambda: lambda x: x * Vocab.TABLE["w5"][0]  # noqa: E731
    x = jnp.float32(1.0)
    for _ in range(3):
        assert float(jitted(make(), x)) == 5.0  # A rebuilt reader each step.
    assert traces == 1
    Vocab.TABLE["w5"][0] = 7
    assert float(jitted(make(), x)) == float(make()(x)) == 7.0
    assert traces == 2
    Vocab.TABLE["w5"] = [9, 1]
    assert float(jitted(make(), x)) == 9.0
    assert traces == 3
    Vocab.TABLE = {"w5": [11]}
    assert float(jitted(make(), x)) == 11.0
    assert traces == 4


def _reference_state(obj) -> tuple:
    # `_nested_state` as its docstring says, in Python: the fast path must give this exactly.
    items = _items(obj)
    inner = [x for x in items if type(x) in (list, dict, set)]
    lengths = [len(x) for x in inner]
    if lengths and max(lengths) > 256:
        lengths = [size(n) for n in lengths]
    dicts = [x for x in inner if type(x) is dict]
    return (
        size(len(items)),
        *items,
        *lengths,
        *chain.from_iterable(inner),
        *chain.from_iterable(d.values() for d in dicts),
    )


_scalars = st.one_of(st.integers(-3, 3), st.text(max_size=2), st.none(), st.floats(0, 1))
_small = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=3),
    st.dictionaries(st.text(max_size=2), _scalars, max_size=3),
    st.sets(st.integers(0, 5), max_size=3),
    st.tuples(_scalars, _scalars),
)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.lists(_small, max_size=8),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), _small, max_size=8),
        st.sets(st.one_of(st.integers(), st.text(max_size=2)), max_size=8),
    )
)
def test_nested_state_is_the_reference(obj):
    got, want = _nested_state(obj), _reference_state(obj)
    assert len(got) == len(want) and all(a is b for a, b in zip(got, want))
