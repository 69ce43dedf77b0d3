"""Values keyed by what their C storage holds, not by a protocol their class can override
(attack round 8a, findings 07 and 08): a subclass of a builtin whose `__str__`/`__int__`/...
says something else than the value it computes with, a NamedTuple or frozenset subclass whose
`__iter__` shows other items, a partial subclass whose `args` is a property. Two such objects
holding different values have different keys; `intern` never returns one for the other, and
`es.filter_jit` never reuses one's program for the other."""

import functools as ft
import struct
import typing

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


class Act(str):
    def __str__(self):
        return self.upper()


class Width(int):
    def __int__(self):
        return 0

    def __index__(self):
        return 0


class Scale(float):
    def __float__(self):
        return 1.0


class Phase(complex):
    def __complex__(self):
        return 0j

    real = property(lambda self: 0.0)  # pyright: ignore
    imag = property(lambda self: 0.0)  # pyright: ignore


class Tag(bytes):
    def __bytes__(self):
        return b""

    def __getitem__(self, i):  # pyright: ignore
        return b""


# Each: the subclass, how its true value is read without its own methods, and a strategy of
# values of its base.
_SUBCLASSES = {
    "str": (Act, str.__str__, st.text(max_size=4)),
    "int": (Width, int.__int__, st.integers(-3, 3)),
    "float": (Scale, float.__float__, st.floats(allow_nan=True, width=64)),
    "bytes": (Tag, lambda b: bytes.__getitem__(b, slice(None)), st.binary(max_size=3)),
}


def _exact(v):
    # What tells two builtin values apart, type-exactly: a float by its bits.
    return struct.pack("<d", v) if type(v) is float else (type(v), v)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(_SUBCLASSES)))
def test_builtin_subclasses_keyed_by_the_value_they_hold(data, name):
    cls, read, values = _SUBCLASSES[name]
    a, b = data.draw(values), data.draw(values)
    x, y = cls(a), cls(b)
    assert (es.stable_key(x) == es.stable_key(y)) == (_exact(read(x)) == _exact(read(y)))
    # Whatever `intern` returns holds the value given.
    assert _exact(read(es.intern(y))) == _exact(read(y))
    assert type(es.intern(y)) is cls


def test_complex_subclass_keyed_by_its_parts():
    assert es.stable_key(Phase(1 + 2j)) != es.stable_key(Phase(1 + 3j))
    assert es.stable_key(Phase(1 + 2j)) == es.stable_key(Phase(1 + 2j))
    assert complex.__repr__(es.intern(Phase(1 + 3j))) == "(1+3j)"


def _branch(x, act, width):
    y = jnp.maximum(x, 0.0) if act == "relu" else -x
    return jnp.zeros(width) + y.sum()


@pytest.mark.counts_traces
def test_builtin_subclass_branch_differential():
    # Eager Python, `es.filter_jit` and the same call on `es.intern` of the values agree.
    traces = 0

    def counted(x, act, width):
        nonlocal traces
        traces += 1
        return _branch(x, act, width)

    jf = es.filter_jit(counted)
    x = jnp.ones(2)
    for act, width in [(Act("relu"), Width(3)), (Act("RELU"), Width(5)), (Act("relu"), Width(3))]:
        want = _branch(x, act, width)
        for got in (jf(x, act, width), _branch(x, es.intern(act), es.intern(width))):
            assert got.shape == want.shape and bool((got == want).all())
    assert traces == 2


class Pt(typing.NamedTuple):
    x: float
    y: float

    def __iter__(self):
        return iter((self.x,))


class Tags(frozenset):
    def __iter__(self):
        return iter(())


class Bound(ft.partial):
    @property
    def args(self):
        return ()

    @property
    def func(self):  # pyright: ignore
        return None

    @property
    def keywords(self):
        return {}


def test_namedtuple_subclass_overriding_iter_keyed_by_its_fields():
    assert es.stable_key(Pt(1.0, 2.0)) != es.stable_key(Pt(1.0, 3.0))
    es.intern(Pt(1.0, 2.0))
    assert es.intern(Pt(1.0, 3.0)).y == 3.0
    # With an array: keyed by the fields, not by `__iter__`; never substituted (attack 11c-03).
    one, two, three = (np.array([v]) for v in (1.0, 2.0, 3.0))
    # (`Pt` declares floats; an array in its place is what is tested.)
    assert es.stable_key(Pt(one, two)) != es.stable_key(Pt(one, three))  # pyright: ignore[reportArgumentType]
    p = Pt(one, two)  # pyright: ignore[reportArgumentType]
    assert es.intern(p) is p


def test_frozenset_subclass_overriding_iter_keyed_by_its_items():
    assert es.stable_key(Tags({"a"})) != es.stable_key(Tags({"b"}))
    es.intern(Tags({"a"}))
    assert "b" in es.intern(Tags({"b"}))


def test_partial_subclass_overriding_its_attributes_keyed_by_its_storage():
    assert es.stable_key(Bound(jnp.add, 1.0)) != es.stable_key(Bound(jnp.add, 2.0))
    assert es.stable_key(Bound(jnp.add, y=1.0)) != es.stable_key(Bound(jnp.add, y=2.0))
    assert es.stable_key(Bound(jnp.add, 1.0)) == es.stable_key(Bound(jnp.add, 1.0))
    es.intern(Bound(jnp.add, 1.0))
    assert float(es.intern(Bound(jnp.add, 2.0))(0.0)) == 2.0


@pytest.mark.counts_traces
def test_partial_subclass_differential():
    traces = 0

    def f(x, g):
        nonlocal traces
        traces += 1
        return g(x)

    jf = es.filter_jit(f)
    x = jnp.float32(0.0)
    for v in (1.0, 2.0, 1.0):
        g = Bound(jnp.add, v)
        assert float(g(x)) == float(jf(x, g)) == float(es.intern(g)(x)) == v
    assert traces == 2


class Half(np.float64):
    def tobytes(self, order="C"):  # pyright: ignore
        return b""


def test_numpy_scalar_subclass_keyed_by_its_bytes():
    assert es.stable_key(Half(1.0)) != es.stable_key(Half(2.0))
    es.intern(Half(1.0))
    assert float(es.intern(Half(2.0))) == 2.0
