"""Library values whose parts are integers the library keeps as given (attack 15b-01, 02, 04):
`Fraction(np.int64(3))` holds NumPy ints, `UUID(int=True)` a bool, and
`jax.ShapeDtypeStruct((np.int64(3),), ...)` a NumPy dimension, each `==` to the one holding a
Python `int`, yet computing otherwise (`x_int8 * part` promotes to int32 for a NumPy int, stays
int8 for a Python one; `fr ** 40` wraps in int64). Their value keys (`K-fraction`, `K-uuid`,
`K-jax-value`) count only where every part is exactly `int`; else the very object."""

import uuid
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


INTS: list[Callable[[int], Any]] = [int, np.int64, np.int32, np.int8, bool]


def _fraction(make: Callable[[int], Any], n: int) -> Any:
    return Fraction(make(n))


def _uuid(make: Callable[[int], Any], n: int) -> Any:
    return uuid.UUID(int=make(n))


def _struct(make: Callable[[int], Any], n: int) -> Any:
    return jax.ShapeDtypeStruct((make(n),), jnp.int8)


def _part(value: Any) -> Any:
    if isinstance(value, Fraction):
        return value.numerator
    if isinstance(value, uuid.UUID):
        return value.int
    return value.shape[0]


KINDS = [_fraction, _uuid, _struct]


def _times_part(x, value):
    return x * _part(value)


@settings(deadline=None, max_examples=60)
@given(kind=st.sampled_from(KINDS), a=st.sampled_from(INTS), b=st.sampled_from(INTS))
def test_equal_keys_only_for_the_same_integer_type(kind, a, b):
    first, second = kind(a, 1), kind(b, 1)
    same = type(_part(first)) is type(_part(second))
    equal = es.stable_key(first) == es.stable_key(second)
    assert not equal or same  # Never equal across integer types.
    assert equal or not (a is b is int)  # Python ints keep their value key.
    if not same:
        assert es.intern(second) is not es.intern(first)


@pytest.mark.parametrize("kind", KINDS, ids=["Fraction", "UUID", "ShapeDtypeStruct"])
@pytest.mark.parametrize("make", [np.int64, bool], ids=["numpy", "bool"])
def test_a_program_is_not_served_to_the_other_integer_type(kind, make):
    x = jnp.ones(2, jnp.int8)
    plain, other = kind(int, 1), kind(make, 1)
    jitted = es.filter_jit(_times_part)
    assert jitted(x, plain).dtype == jnp.int8
    served = jitted(x, other)
    eager = _times_part(x, other)
    # Not `equinox.filter_jit(_times_part)`: its cache takes the two for one (`==`).
    assert served.dtype == eager.dtype
    assert served.tolist() == eager.tolist()


def test_a_fraction_of_numpy_ints_wraps_as_eagerly():
    exact, wrapped = Fraction(3), Fraction(np.int64(3))  # pyright: ignore[reportCallIssue, reportArgumentType]

    def power(x, fr):
        return x * float(fr**40)  # 3**40 > 2**63: wraps in int64 arithmetic.

    x = jnp.float32(1.0)
    jitted = es.filter_jit(power)
    with np.errstate(over="ignore"):
        assert float(jitted(x, exact)) == float(np.float32(3**40))
        assert float(jitted(x, wrapped)) == float(power(x, wrapped)) != float(power(x, exact))


def test_a_struct_whose_dtype_holds_metadata_keeps_its_own_key():
    # NumPy's dtype `==` ignores metadata, and so does JAX's struct `==` (attack 15b-01).
    tagged = jax.ShapeDtypeStruct((3,), np.dtype("f4", metadata={"unit": "m"}))
    plain = jax.ShapeDtypeStruct((3,), np.float32)
    assert tagged == plain and es.stable_key(tagged) != es.stable_key(plain)
    assert es.stable_key(plain) == es.stable_key(jax.ShapeDtypeStruct((3,), np.float32))
    es.intern(plain)
    assert es.intern(tagged) is tagged
