"""A list, dict or set past the object budget whose items can never change (`K-too-deep`,
`_context.held_items`; attack round 6, finding 06): a function closing over an unchanged
vocabulary of 60,000 pairs hit on no call (each re-walked it and traced again, "mutated"); it is
now keyed by its identity and its items' identities, watched by `is`, so the same unchanged
object hits and any item added, removed or replaced (even by an equal value) is another key.
One holding small lists, dicts or sets of such items: `test_keys_too_many_nested.py`."""

import math

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import _context, compute, too_many_objects
from eqxstable._keys._context import MAX_OBJECTS


# Past a budget of 2,000 objects (`small_budget`), as past the real one, which one test keeps.
_N = 2_010


def _vocab(n: int = _N) -> list:
    return [(i, str(i)) for i in range(n)]


@pytest.mark.counts_traces
@pytest.mark.usefixtures("small_budget")
def test_a_closure_over_an_unchanged_big_list_hits():
    vocab = _vocab()
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * len(vocab) + vocab[0][0]

        return f

    f = es.filter_jit(make())
    for _ in range(3):
        assert float(f(jnp.float32(1.0))) == _N
    assert traces == 1
    # A rebuilt closure over the same unchanged list: a hit, not a walk and a trace.
    assert float(es.filter_jit(make())(jnp.float32(2.0))) == 2 * _N
    assert traces == 1
    vocab.append((-1, "new"))
    assert float(f(jnp.float32(1.0))) == _N + 1
    assert traces == 2
    # An item replaced by a new one (whatever its value): another key, traced again.
    vocab[0] = (5, "0")
    assert float(f(jnp.float32(1.0))) == _N + 1 + 5
    assert traces == 3


@pytest.mark.usefixtures("small_budget")
@pytest.mark.parametrize(
    "make",
    [
        _vocab,
        lambda: {str(i): (i,) for i in range(_N)},
        lambda: {(i, str(i)) for i in range(_N)},
    ],
    ids=["list", "dict", "set"],
)
def test_an_unchanged_big_container_keeps_its_key(make):
    data = make()
    key, watch = compute(data)
    # A stable key, not one equal to nothing.
    assert not too_many_objects(key) and key.identity
    assert watch.valid()
    assert key == compute(data)[0]
    # An equal copy is another object: another key (its items could change apart).
    assert key != compute(make())[0]


def test_the_real_budget():
    data = _vocab(MAX_OBJECTS + 10)
    key, watch = compute(data)
    assert not too_many_objects(key) and watch.valid()
    assert key == compute(data)[0]


_ITEMS = st.sampled_from([0.0, -0.0, 1, 1.0, True, math.nan, "1", (1,), (1.0,)])


@settings(max_examples=30, deadline=None)
@given(_ITEMS, _ITEMS, st.integers(0, 299))
def test_a_replaced_item_is_another_key(old, new, position):
    # Keyed by identity: an item replaced by an equal value (`1 == 1.0 == True`, `0.0 == -0.0`)
    # is another key; the same object put back is the same key. A budget of 200 objects keeps
    # each example fast (`MAX_OBJECTS` is read on every walk).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_context, "MAX_OBJECTS", 200)
        data = [(i,) for i in range(300)]
        data[position] = (old,)
        before, watch = compute(data)
        assert not too_many_objects(before) and watch.valid()
        kept = data[position]
        data[position] = (new,)
        assert not watch.valid()
        assert compute(data)[0] != before
        data[position] = kept
        assert compute(data)[0] == before


@pytest.mark.counts_traces
@pytest.mark.usefixtures("small_budget")
def test_a_big_list_holding_a_list_of_lists_is_still_never_a_hit():
    # An item that can change (a list) two levels down, where the walk did not reach: a key
    # equal to nothing.
    last = [[1.0]]
    data: list = [(i,) for i in range(_N)]
    data.append(last)
    f = es.filter_jit(lambda x: x * data[-1][0][0])
    assert float(f(jnp.float32(1.0))) == 1.0
    last[0][0] = 3.0
    assert float(f(jnp.float32(1.0))) == 3.0
    assert compute(lambda: data)[0] != compute(lambda: data)[0]
