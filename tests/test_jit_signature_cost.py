"""A call with a big static pytree of Python scalars (a vocabulary of pairs; attack round 8a,
finding 11): its miss described each of its 100,000 static leaves with a key computation of its
own (a context and a walk each), a flatten per tuple, and six full garbage collections, seconds
where `equinox.filter_jit` takes well under one. Exact scalars are now keyed without a context
(`_keys.__init__._ATOMS`) and an exact tuple's or list's items are described in place; the
descriptions and keys are what they were."""

import gc

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable import _keys
from eqxstable._jit import _signature
from eqxstable._keys import compute, Key
from eqxstable._keys._context import Ctx, top


@pytest.fixture
def computations(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The objects a key computation (`top`, a context and a walk) ran for."""
    seen: list[object] = []

    def counted(obj, ctx, content_ok):
        seen.append(obj)
        return top(obj, ctx, content_ok)

    monkeypatch.setattr(_keys, "top", counted)
    return seen


@pytest.mark.counts_traces
def test_a_static_vocabulary_is_keyed_without_a_computation_per_leaf(computations):
    vocab = tuple((i, i) for i in range(5_000))
    traces = 0

    def f(v, x):
        nonlocal traces
        traces += 1
        return x * v[1][0]

    jitted = es.filter_jit(f)
    assert float(jitted(vocab, jnp.float32(2.0))) == 2.0
    # The function and a few objects of the call, not 10,000 leaves and 5,000 nodes' data.
    assert len(computations) < 50
    computations.clear()
    assert float(jitted(vocab, jnp.float32(3.0))) == 3.0
    assert traces == 1
    assert len(computations) == 0
    # Another vocabulary: a miss, explained by the leaf that differs.
    other = vocab[:-1] + ((7, 8),)
    assert float(jitted(other, jnp.float32(1.0))) == 1.0
    assert traces == 2
    miss = jitted.misses[-1]
    assert miss.path == "args[0][4999][0]"


def test_the_collector_runs_again_after_a_miss():
    gc.enable()
    es.filter_jit(lambda v, x: x * v[0][0])(tuple((i, i) for i in range(300)), jnp.float32(1.0))
    assert gc.isenabled()


_SCALARS = st.one_of(
    st.integers(),
    st.booleans(),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.floats(allow_nan=True),
    st.complex_numbers(allow_nan=True),
    st.none(),
    st.just(...),
)


@settings(max_examples=200, deadline=None)
@given(_SCALARS)
def test_a_scalar_is_keyed_as_a_computation_keys_it(x):
    ctx = Ctx()
    slow = Key(top(x, ctx, True), ctx.identity, not ctx.own_eq)
    fast, watch = compute(x)
    assert fast == slow
    assert hash(fast) == hash(slow)
    assert (fast.identity, fast.substitutable) == (slow.identity, slow.substitutable)
    assert not watch and not ctx.watch()
    assert es.stable_key(x) == slow


_TREES = st.recursive(
    _SCALARS | st.builds(lambda v: np.float32(v), st.floats(width=32)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=2), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(_TREES, _TREES)
def test_a_call_is_described_as_one_flatten_a_node_describes_it(a, b):
    # The description with the in-place paths for tuples, lists and scalars equals the one
    # made by flattening every node one level (the general path, forced).
    fast = _signature.signature((a, jnp.float32(1.0)), {"k": b})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_signature, "_SEQUENCES", frozenset())
        patch.setattr(_signature, "_SCALAR_LEAVES", frozenset())
        slow = _signature.signature((a, jnp.float32(1.0)), {"k": b})
    assert fast.leaves == slow.leaves
    assert fast.nodes == slow.nodes
    assert fast.aliases == slow.aliases
