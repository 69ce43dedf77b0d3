"""A method is taken as one `dataclasses` generated (held as the object, never walked) only by
its own code object, never by `__wrapped__`: a user's own method decorated with
`functools.wraps(<a generated method>)`, which keeps the parent's signature on an overriding
`__init__` or `__eq__`, is the user's code, and the globals it reads are keyed (attack round
11a, finding 05)."""

import dataclasses
import functools
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys._class_entries import generated


SCALE = 2.0


@dataclasses.dataclass
class Base:
    a: Any


class Child(Base):
    @functools.wraps(Base.__init__)  # Keeps Base's signature.
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.a = self.a * SCALE


@dataclasses.dataclass(frozen=True)
class Point:
    x: float


@dataclasses.dataclass(frozen=True)
class Strict:
    # The user's own `==` (which `dataclasses` keeps), wrapped to look like a generated one:
    # each object equal only to itself, where the fields would call two equal.
    x: float

    @functools.wraps(Point.__eq__)
    def __eq__(self, other):  # pyright: ignore[reportIncompatibleMethodOverride]
        return self is other


def test_what_is_generated():
    assert generated(Base.__init__)
    assert generated(Base.__eq__)
    assert generated(Base.__dict__["__repr__"])  # Through its recursion guard.
    assert not generated(Child.__init__)
    assert not generated(Strict.__dict__["__eq__"])
    assert not generated(functools.wraps(Base.__init__)(lambda *a: None))


@pytest.mark.counts_traces
def test_a_wrapped_init_reading_a_global_is_keyed():
    global SCALE
    traces = 0

    def run(fn, x):
        nonlocal traces
        traces += 1
        return fn(x)

    w = es.filter_jit(run)
    make = lambda: lambda x: Child(x).a  # noqa: E731
    x = jnp.ones(2)
    try:
        np.testing.assert_allclose(w(make(), x), 2.0)
        SCALE = 3.0
        g = make()
        np.testing.assert_allclose(w(g, x), np.asarray(eqx.filter_jit(run)(g, x)))
        np.testing.assert_allclose(w(g, x), g(x))
        assert float(w(g, x)[0]) == 3.0
        assert traces == 3  # es: 2; the equinox reference: 1.
    finally:
        SCALE = 2.0


@settings(max_examples=30, deadline=None)
@given(st.floats(-10, 10, allow_nan=False), st.floats(-10, 10, allow_nan=False))
def test_a_wrapped_eq_is_the_users(a, b):
    # The user's `==`, not the fields': two objects share a key only where that `==` calls them
    # equal, and `intern` never hands out one for the other.
    p, q = Strict(a), Strict(b)
    assert not p == q  # pyright: ignore[reportOperatorIssue]
    assert es.stable_key(p) != es.stable_key(q)
    assert es.intern(q) is q


def test_a_generated_method_rebound_is_keyed_again():
    @dataclasses.dataclass
    class C:
        a: float = 1.0

    before = es.stable_key(C)
    C.__init__.__defaults__ = (2.0,)
    assert C().a == 2.0
    assert es.stable_key(C) != before
