"""A static value a module reads back is its own where it cannot be another's: a NumPy scalar of
the user's subclass holding attributes (attack11a finding 13), and a structured array, whose
dtype's field names can be assigned in place (attack11a finding 11)."""

import warnings
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


class Length(np.float64):
    def factor(self) -> float:
        return {"m": 1.0, "s": 60.0}[self.unit]  # pyright: ignore[reportAttributeAccessIssue]


def _length(value: float, unit: str) -> Length:
    out = Length(value)
    out.unit = unit  # pyright: ignore[reportAttributeAccessIssue]
    return out


class _Stable(es.StableModule):
    v: Any = es.field(static=True)

    def __call__(self, x):
        v = self.v[0] if isinstance(self.v, list) else self.v
        return x * v.factor()


class _Plain(eqx.Module):
    v: Any = eqx.field(static=True)

    def __call__(self, x):
        v = self.v[0] if isinstance(self.v, list) else self.v
        return x * v.factor()


def _stabilized(v):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Equinox warns about a list in a static field.
        return es.stabilize(_Plain(v))


BUILDS = pytest.mark.parametrize("build", [_Stable, _stabilized], ids=["stable", "stabilize"])
WRAPS = st.sampled_from([lambda s: s, lambda s: [s], lambda s: [1, s][1:]])


@BUILDS
@settings(deadline=None, max_examples=25)
@given(st.floats(0.5, 8.0), st.sampled_from(["m", "s"]), WRAPS)
def test_a_numpy_scalar_subclass_with_attributes_reads_back_as_given(build, value, unit, wrap):
    build(wrap(_length(value, "s" if unit == "m" else "m")))
    given_ = _length(value, unit)
    m = build(wrap(given_))
    read = m.v[0] if isinstance(m.v, list) else m.v
    assert read is given_
    x = jnp.ones(2)
    assert np.allclose(m(x), {"m": 1.0, "s": 60.0}[unit])


@pytest.mark.counts_traces
def test_a_stable_modules_subclass_scalars_never_share_a_program_across_attributes():
    traces = 0

    def run(m, x):
        nonlocal traces
        traces += 1
        return m(x)

    f = eqx.filter_jit(run)
    x = jnp.ones(1)
    assert float(f(_Stable(_length(2.0, "m")), x)[0]) == 1.0
    assert float(f(_Stable(_length(2.0, "s")), x)[0]) == 60.0
    assert float(f(_Stable(_length(2.0, "s")), x)[0]) == 60.0
    assert traces == 2  # The rebuilt module with the same unit shares the second program.


def test_a_plain_numpy_scalar_is_still_one_canonical_form():
    a, b = _Stable(np.float32(2.0)), _Stable(np.float32(2.0))
    assert a.__dict__["v"] is b.__dict__["v"]


def _record(a: float, b: float) -> np.ndarray:
    return np.array([(a, b)], dtype=[("a", "f8"), ("b", "f8")])


class _Table(es.StableModule):
    arr: object = es.field(static=True)


class _PlainTable(eqx.Module):
    arr: object = eqx.field(static=True)


def _stabilized_table(arr):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Equinox warns about an array in a static field.
        return es.stabilize(_PlainTable(arr))


TABLES = pytest.mark.parametrize("build", [_Table, _stabilized_table], ids=["stable", "stabilize"])


@TABLES
@settings(deadline=None, max_examples=25)
@given(st.floats(-9, 9), st.floats(-9, 9), st.sampled_from(["given", "read back"]))
def test_renaming_a_structured_arrays_fields_changes_no_other_value(build, a, b, renamed):
    first = _record(a, b)
    m1 = build(first)
    target = first if renamed == "given" else m1.arr
    target.dtype.names = ("b", "a")
    fresh = _record(a, b)
    m2 = build(fresh)
    assert m2.arr["a"][0] == a and m2.arr["b"][0] == b
    assert m2.arr.dtype == fresh.dtype
    if renamed == "given" and build is _stabilized_table:
        # It froze a copy with a dtype of its own: the given array's renaming is not its.
        assert m1.arr["a"][0] == a
    elif renamed == "given":
        # A `StableModule` checks the array it was given, and says that it changed.
        with pytest.raises(TypeError, match="changed in place"):
            m1.arr


@settings(deadline=None, max_examples=25)
@given(st.floats(-9, 9), st.floats(-9, 9))
def test_intern_never_hands_out_a_structured_array_made_for_another(a, b):
    first = (_record(a, b), "k")
    es.intern(first)
    second = (_record(a, b), "k")
    got = es.intern(second)
    first[0].dtype.names = ("b", "a")
    assert got[0]["a"][0] == a
    assert got is second


def test_plain_arrays_are_still_one_canonical_form():
    a, b = _Table(np.arange(3.0)), _Table(np.arange(3.0))
    # One shared value (the `Static` both modules store); each read is a view of its own.
    assert a.__dict__["arr"] is b.__dict__["arr"]
    assert a.arr is not b.arr and a.arr.base is b.arr.base


@TABLES
def test_a_shared_static_array_cannot_be_made_writable_again(build):
    # The read-only copy two modules share: making it writable would change both.
    m1, m2 = build(np.arange(3.0)), build(np.arange(3.0))
    with pytest.raises(ValueError, match="WRITEABLE"):
        m1.arr.flags.writeable = True
    assert not m2.arr.flags.writeable and m2.arr[0] == 0.0
