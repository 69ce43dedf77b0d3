"""An object whose walk ran out of the object budget is not walked again at its next meetings
(`_keys/_ran_out.py`; attack round 14a, finding 02): the very same jitted function closing over
a dict of 50,000 small dicts of lists was walked (with restarts) and traced at every call, half
a second a call. Its key is equal to nothing either way, so every call still traces, follows
every change and is never served a stale program; only the walk is skipped, for 48 meetings,
then twice as many each time it runs out again, and the memo keeps nothing alive."""

import gc
import weakref

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import _ran_out, too_many_objects

from .helpers import count_traces


# Past a budget of 2,000 objects (`small_budget`), in a shape no past-budget rule keys by
# identity: a dict of small dicts holding lists.
_N = 1_100


def _table(n: int = _N) -> dict:
    return {i: {"a": [i, i + 1]} for i in range(n)}


@pytest.fixture(autouse=True)
def _fresh_memo():
    _ran_out.clear()
    yield
    _ran_out.clear()


@pytest.mark.usefixtures("small_budget")
@pytest.mark.counts_traces
def test_a_function_past_the_budget_is_walked_again_only_after_its_skips(walks):
    table = _table()

    def body(x, f):
        return f(x)

    counter = count_traces(body)
    run = es.filter_jit(counter)
    f = lambda v: v * len(table)  # noqa: E731
    x = jnp.ones(2)

    def calls_to_next_walk() -> int:
        # Calls until one walks `f` whole (small walks are the call's other parts).
        for calls in range(1, 2 * _ran_out.MAX_SKIP):
            walks.clear()
            assert float(run(x, f)[0]) == _N
            if max(walks) > 1_000:
                return calls
        raise AssertionError("never walked again")

    assert calls_to_next_walk() == 1
    # A call meets `f` up to three times (lookup, the miss's explanation, the key after the
    # trace): the walk comes back after a third of the skips, at the earliest.
    first = calls_to_next_walk()
    assert _ran_out.FIRST_SKIP // 3 <= first <= _ran_out.FIRST_SKIP + 1
    # Twice as many skips after it ran out again.
    second = calls_to_next_walk()
    assert second >= 2 * first - 1
    # Every call traced (a key equal to nothing), and was right.
    assert counter.count == 1 + first + second


@pytest.mark.usefixtures("small_budget")
@pytest.mark.counts_traces
def test_a_skipped_key_still_matches_nothing_and_says_why():
    table = _table()
    f = lambda v: v * len(table)  # noqa: E731
    first = es.stable_key(f)
    second = es.stable_key(f)
    assert too_many_objects(first) and too_many_objects(second)
    assert first != second
    run = es.filter_jit(lambda x, f: f(x))
    for _ in range(3):
        run(jnp.ones(1), f)
    assert run.cache_info().hits == 0
    for miss in run.misses[1:]:
        assert miss.kind == "identity"
        assert "too many objects" in miss.reason
        assert f"a dict of {_N:,} items (dict, int)" in miss.reason


@pytest.mark.usefixtures("small_budget")
@settings(max_examples=10, deadline=None)
@given(
    changes=st.lists(
        st.sampled_from(["none", "set", "add", "shrink", "grow_back"]), min_size=1, max_size=8
    )
)
def test_every_call_follows_the_table_as_eager_python_does(changes):
    _ran_out.clear()
    table = _table()
    f = lambda v: v * (len(table) + table[0]["a"][0])  # noqa: E731
    run = es.filter_jit(lambda x, f: f(x))
    x = jnp.ones(1)
    for change in changes:
        if change == "set":
            table[0]["a"][0] += 1
        elif change == "add":
            table[len(table) + 5] = {"a": [0, 0]}
        elif change == "shrink":
            for k in list(table)[5:]:
                del table[k]
        elif change == "grow_back":
            table.update(_table())
        assert float(run(x, f)[0]) == float(f(1.0))


@pytest.mark.usefixtures("small_budget")
def test_a_shrunk_object_hits_again_after_its_skips():
    table = _table()
    f = lambda v: v * len(table)  # noqa: E731
    run = es.filter_jit(lambda x, f: f(x))
    x = jnp.ones(1)
    run(x, f)
    for k in list(table)[10:]:
        del table[k]
    for _ in range(_ran_out.FIRST_SKIP + 1):
        assert float(run(x, f)[0]) == 10.0
    hits = run.cache_info().hits
    run(x, f)
    assert run.cache_info().hits == hits + 1


def _keyed_and_dropped() -> tuple[weakref.ref, weakref.ref]:
    class Item:
        pass

    sentinel = Item()
    # A tuple takes no weak reference: the memo must not hold it.
    data = (sentinel, *({"a": [i]} for i in range(_N)))
    f = lambda v: v * len(data)  # noqa: E731
    assert too_many_objects(es.stable_key(data))
    assert too_many_objects(es.stable_key(f))
    assert len(_ran_out._memo) == 2
    return weakref.ref(sentinel), weakref.ref(f)


@pytest.mark.usefixtures("small_budget")
def test_the_memo_keeps_nothing_alive():
    seen, fref = _keyed_and_dropped()
    gc.collect()
    assert seen() is None and fref() is None
