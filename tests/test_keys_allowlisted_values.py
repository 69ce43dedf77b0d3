"""Value keys and substitution only by the allowlist (`eqxstable/_keys/README.md`): the library
values it names (`Decimal`, `Fraction`, datetimes, paths, patterns, UUIDs, signatures, dtypes,
JAX's own values, treedefs, descriptors) are keyed by value; a subclass of one, or anything a row
does not name, is not."""

import datetime
import decimal
import fractions
import inspect
import pathlib
import re
import types
import uuid
import zoneinfo
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

import eqxstable as es

from .keys_support import key


def test_allowlisted_library_values():
    D = decimal.Decimal
    assert key(D("1.00")) != key(D("1.0")) and key(D("1.5")) == key(D("1.5"))
    assert es.intern(D("1.5")) is es.intern(D("1.5"))
    assert key(D("NaN")) != key(D("sNaN"))
    F = fractions.Fraction
    assert key(F(1, 2)) == key(F(2, 4)) and key(F(1, 2)) != key(F(1, 3))
    tz = datetime.timezone(datetime.timedelta(hours=1), "X")
    t1 = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    t2 = datetime.datetime(2020, 1, 1, 1, tzinfo=tz)
    assert t1 == t2 and key(t1) != key(t2)
    assert key(t1.replace(fold=1)) != key(t1)
    assert key(datetime.datetime(2020, 1, 1)) == key(datetime.datetime(2020, 1, 1))
    z = zoneinfo.ZoneInfo("UTC")
    assert key(datetime.datetime(2020, 1, 1, tzinfo=z)) == key(
        datetime.datetime(2020, 1, 1, tzinfo=z)
    )
    assert key(datetime.timedelta(1)) != key(datetime.timedelta(0, 1))
    assert key(datetime.time(1, fold=1)) != key(datetime.time(1))
    assert key(pathlib.PurePosixPath("a")) != key(pathlib.Path("a"))
    assert key(pathlib.PurePosixPath("a/b")) != key(pathlib.PurePosixPath("a/c"))
    assert key(pathlib.PurePosixPath("a")) != key(pathlib.PureWindowsPath("a"))
    assert key(pathlib.Path("a/b")) == key(pathlib.Path("a") / "b")
    assert key(re.compile("a")) != key(re.compile("a", re.I))
    u = uuid.UUID(int=5)
    assert key(u) == key(uuid.UUID(int=5)) and key(u) != key(uuid.UUID(int=6))
    assert key(u) != key(uuid.UUID(int=7)) and key(u) != key(uuid.UUID(int=5 + 2**100))
    assert key(inspect.signature(lambda a, b=1: 0)) != key(inspect.signature(lambda a, b=2: 0))
    assert key(np.dtype("f4")) == key(np.dtype(np.float32)) != key(np.dtype("f8"))
    for v in (D("1.5"), F(1, 2), t1, pathlib.Path("a"), u, np.dtype("f4")):
        assert not key(v).identity and key(v).substitutable

    # A subclass is not on the list by its base's row: its own `==`, never substituted.
    class MyDecimal(decimal.Decimal):
        pass

    m = MyDecimal("1.0")
    assert es.intern(m) is m and key(m) != key(D("1.0"))


def test_jax_values_by_their_own_eq_within_the_type_and_substituted():
    # `K-jax-value`: JAX keys its own caches by these objects' `==`, so equal ones share a key
    # and `intern` hands out one of them (a user's own `==` class is never substituted).
    def sds(dtype: Any) -> Any:
        return jax.ShapeDtypeStruct((2, 3), dtype)

    first = sds(jnp.float32)
    assert es.intern(first) is first and es.intern(sds(jnp.float32)) is first
    assert key(sds(jnp.float32)) == key(first) != key(sds(jnp.int32))
    assert key(jax.ShapeDtypeStruct((3, 2), jnp.float32)) != key(first)
    assert es.intern(sds(jnp.int32)) is not first
    assert not key(first).identity and key(first).substitutable


def test_structured_dtypes_watched_never_substituted():
    a = np.dtype([("a", "f4"), ("b", "f4")])
    k = key(a)
    assert not k.substitutable
    a.names = ("x", "y")
    assert key(a) != k


@given(st.decimals(allow_nan=True), st.decimals(allow_nan=True))
def test_decimal_keys_equal_only_for_the_same_digits(a, b):
    same = a.as_tuple() == b.as_tuple()
    assert (key(a) == key(b)) == same


def test_treedefs_by_node_data_type_exactly():
    assert key(jax.tree_util.tree_structure({"a": 1})) == key(
        jax.tree_util.tree_structure({"a": 2})
    )
    assert key(jax.tree_util.tree_structure((1, 2))) != key(jax.tree_util.tree_structure([1, 2]))
    assert key(jax.tree_util.tree_structure((1,))) != key(jax.tree_util.tree_structure((1, 2)))


SCALE = 2.0


class WithProperty:
    @property
    def scale(self):
        return SCALE


def test_descriptors_by_the_functions_they_run():
    prop = WithProperty.__dict__["scale"]
    fget = types.FunctionType(prop.fget.__code__, globals())
    fget.__qualname__ = prop.fget.__qualname__  # Python 3.10 takes it from `co_name`.
    twin = property(fget)
    assert key(prop) == key(twin) and key(prop) != key(property(lambda self: SCALE))
    before = key(prop)
    globals()["SCALE"] = 3.0
    try:
        assert key(prop) != before
    finally:
        globals()["SCALE"] = 2.0
