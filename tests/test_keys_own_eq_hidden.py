"""A user class with its own `__eq__`/`__hash__` whose C base holds state Python cannot read
(`array.array`, `random.Random`, `collections.deque`, `io.StringIO`; attack round 6, finding 10)
is `K-opaque`, as its base is, never joined by its `==`: two equal objects may compute
differently. A class with its own `==` and no hidden state is still compared by it."""

import array
import collections
import io
import random

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


def _loose(base: type) -> type:
    # An `==` that calls every two objects of the class equal: the worst a user's `==` can say.
    return type(
        f"Loose{base.__name__}",
        (base,),
        {"__eq__": lambda self, o: type(o) is type(self), "__hash__": lambda self: 0},
    )


_CASES = {
    "array": (_loose(array.array), lambda v: ("d", [v]), lambda o: o[0]),
    "deque": (_loose(collections.deque), lambda v: ([v],), lambda o: o[0]),
    "stringio": (_loose(io.StringIO), lambda v: (repr(v),), lambda o: float(o.getvalue())),
}


@pytest.mark.counts_traces
@pytest.mark.parametrize("case", sorted(_CASES))
def test_equal_objects_with_hidden_state_are_never_joined(case):
    cls, args, read = _CASES[case]
    traces = 0

    @es.filter_jit
    def f(x, o):
        nonlocal traces
        traces += 1
        return x * read(o)

    first = cls(*args(1.0))
    assert float(f(jnp.float32(1.0), first)) == 1.0
    # The same object again: a hit.
    assert float(f(jnp.float32(2.0), first)) == 2.0
    assert traces == 1
    assert float(f(jnp.float32(1.0), cls(*args(2.0)))) == 2.0
    assert traces == 2
    assert es.stable_key(first).identity
    assert es.stable_key(first) != es.stable_key(cls(*args(1.0)))
    assert es.intern(cls(*args(1.0))) is not first


class _Seeded(random.Random):
    def __init__(self, seed):
        super().__init__(seed)
        self.seed_ = seed

    def __eq__(self, o):
        return type(o) is _Seeded and o.seed_ == self.seed_

    def __hash__(self):
        return hash(self.seed_)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 3), st.integers(0, 3))
def test_a_generator_advanced_is_not_a_fresh_one(seed, advanced):
    f = es.filter_jit(lambda x, r: x * r.random())
    used = _Seeded(seed)
    for _ in range(advanced):
        used.random()
    f(jnp.float32(1.0), used)
    expected = jnp.float32(random.Random(seed).random())
    assert f(jnp.float32(1.0), _Seeded(seed)).tobytes() == expected.tobytes()


class _Value:
    # Its own `==`, no hidden state: compared with it, as Equinox does.
    def __init__(self, v):
        self.v = v

    def __eq__(self, o):
        return type(o) is _Value and o.v == self.v

    def __hash__(self):
        return hash(self.v)


@pytest.mark.counts_traces
def test_an_own_eq_class_without_hidden_state_still_shares():
    traces = 0

    @es.filter_jit
    def f(x, o):
        nonlocal traces
        traces += 1
        return x * o.v

    assert float(f(jnp.float32(1.0), _Value(3.0))) == 3.0
    assert float(f(jnp.float32(1.0), _Value(3.0))) == 3.0
    assert traces == 1
    assert es.stable_key(_Value(3.0)) == es.stable_key(_Value(3.0))
