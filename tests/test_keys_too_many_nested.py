"""A list, dict or set past the object budget holding small lists, dicts or sets of values that
can never change (`K-too-deep`, `_context.frozen_nested`; attack finding 7a-14).

A function reading a global list of 60,000 small dicts (or 51,000 one-item lists) went past the
budget, got a key equal to nothing, and every call walked the list again and traced again (about
15 s a call; Equinox 0.1 ms). It is now keyed by its identity, the identities of the containers
it holds and of everything they hold, in one state watched by `is` (C loops a hit): the same
unchanged list hits, and any change inside it, one level down, is another key and a retrace
that reads it as it is now."""

import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._keys import compute, too_many_objects
from eqxstable._keys._context import MAX_OBJECTS


# Past a budget of 2,000 objects, as past the real one, which one test keeps.
_N = 2_010


def _records(n: int = _N) -> list:
    return [{"id": i, "w": float(i)} for i in range(n)]


@pytest.mark.counts_traces
@pytest.mark.usefixtures("small_budget")
def test_a_closure_over_a_big_list_of_dicts_hits_until_it_changes():
    records = _records()
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x * len(records) + records[5]["w"]

    jitted = es.filter_jit(f)
    for _ in range(3):
        assert float(jitted(jnp.float32(1.0))) == _N + 5.0
    assert traces == 1
    assert jitted.cache_info().hits == 2
    # Each change inside, one level down, is seen: the eager answer, traced again.
    records[5]["w"] = 7.0
    assert float(jitted(jnp.float32(1.0))) == _N + 7.0
    assert traces == 2
    records[5]["extra"] = None
    assert float(jitted(jnp.float32(1.0))) == _N + 7.0
    assert traces == 3
    records[5] = {"id": 5, "w": 9.0}
    assert float(jitted(jnp.float32(1.0))) == _N + 9.0
    assert traces == 4
    records.append({"id": -1})
    assert float(jitted(jnp.float32(1.0))) == _N + 1 + 9.0
    assert traces == 5
    assert float(jitted(jnp.float32(1.0))) == _N + 1 + 9.0
    assert traces == 5
    # The miss says why it is keyed by identity.
    assert "past the budget" in jitted.explain()


@pytest.mark.usefixtures("small_budget")
@pytest.mark.parametrize(
    "make",
    [
        lambda: [[i, str(i)] for i in range(_N)],
        _records,
        lambda: {str(i): {i, (i, 1.0)} for i in range(_N)},
    ],
    ids=["list-of-lists", "list-of-dicts", "dict-of-sets"],
)
def test_an_unchanged_big_nested_container_keeps_its_key(make):
    data = make()
    key, watch = compute(data)
    assert not too_many_objects(key) and key.identity
    assert watch.valid()
    assert key == compute(data)[0]
    # An equal copy is another object: another key.
    assert key != compute(make())[0]


@pytest.mark.usefixtures("small_budget")
def test_an_item_moved_between_two_held_lists_is_another_key():
    # The same lists holding the same items in the same order, split elsewhere: the lengths are
    # part of the key.
    a: list = [1, 2]
    b: list = [3]
    data = [a, b] + [[i] for i in range(_N)]
    key, watch = compute(data)
    assert not too_many_objects(key)
    a.pop()
    b.insert(0, 2)
    assert not watch.valid()
    assert compute(data)[0] != key
    # An equal value of another type (`1 == 1.0`) is another key too.
    a[0] = 1.0
    assert compute(data)[0] != key


def test_the_real_budget():
    data = [[i] for i in range(MAX_OBJECTS + 1_000)]
    key, watch = compute(data)
    assert not too_many_objects(key) and watch.valid()
    assert key == compute(data)[0]
    data[-1].append(0)
    assert not watch.valid()
