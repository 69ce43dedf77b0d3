"""Reproductions from the generative zoo (`tests/differential`'s zoo helper), one test each:
objects the zoo found changed between calls (a NumPy void, an enum's class attribute, state left
out of `__getstate__`, `os.environ` and ctypes as static arguments, a user's `tzinfo`, builtin
subclasses with slots or class attributes) are retraced, never served a stale program."""

import ctypes
import datetime
import enum
import os
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es

from .helpers import PartialState
from .keys_support import key


@pytest.mark.counts_traces
@pytest.mark.filterwarnings("ignore:A JAX array is being set as static")
def test_zoo_numpy_void_changed_in_place_is_retraced():
    class Box(eqx.Module):
        v: Any = eqx.field(static=True)

    @es.filter_jit
    def f(box, x):
        return x * float(box.v["a"])

    arr = np.zeros(1, dtype=[("a", "f8"), ("b", "f8")])
    arr[0]["a"] = 1.0
    v = arr[0]
    box = Box(v)
    assert float(f(box, jnp.ones(()))) == 1.0
    v["a"] = 5.0
    assert float(f(box, jnp.ones(()))) == 5.0
    assert es.intern(v) is v


class Weighted(enum.Enum):
    RED = 1

    @property
    def weight(self):
        return getattr(type(self), "scale", 1.0) * self.value


@pytest.mark.counts_traces
def test_zoo_enum_class_attribute_assigned_is_retraced():
    @es.filter_jit
    def f(c, x):
        return x * c.weight

    try:
        assert float(f(Weighted.RED, jnp.ones(()))) == 1.0
        Weighted.scale = 3.0  # pyright: ignore[reportAttributeAccessIssue]
        assert float(f(Weighted.RED, jnp.ones(()))) == 3.0
    finally:
        del Weighted.scale  # pyright: ignore[reportAttributeAccessIssue]
    assert not key(Weighted.RED).identity


class ScaledLeftOut(PartialState):
    """The zoo's `user_getstate` kind, callable: its `==` compares `scale`, which its
    `__getstate__` leaves out."""

    def __call__(self, x):
        return x * self.a * self.scale


@pytest.mark.counts_traces
def test_zoo_getstate_leaving_out_an_attribute_is_not_the_key():
    one, two = ScaledLeftOut(1.0, 2.0), ScaledLeftOut(1.0, 3.0)
    assert es.intern(two) is two and key(one) != key(two)
    f = es.filter_jit(lambda g, x: g(x))
    assert float(f(one, jnp.ones(()))) == 2.0
    assert float(f(two, jnp.ones(()))) == 3.0


@pytest.mark.counts_traces
def test_zoo_environ_and_ctypes_as_static_arguments_changed(monkeypatch):
    monkeypatch.setenv("EQXS_TEST_V", "2")
    f = es.filter_jit(lambda env, x: x * float(env["EQXS_TEST_V"]))
    assert float(f(os.environ, jnp.ones(()))) == 2.0
    os.environ["EQXS_TEST_V"] = "7"
    assert float(f(os.environ, jnp.ones(()))) == 7.0
    g = es.filter_jit(lambda v, x: x * v.value)
    v = ctypes.c_double(1.0)
    assert float(g(v, jnp.ones(()))) == 1.0
    v.value = 2.0
    assert float(g(v, jnp.ones(()))) == 2.0


class ShiftTZ(datetime.tzinfo):
    def __init__(self, hours):
        self.hours = hours

    def utcoffset(self, dt):
        return datetime.timedelta(hours=self.hours)

    def tzname(self, dt):
        return "shift"

    def dst(self, dt):
        return datetime.timedelta(0)


@pytest.mark.counts_traces
def test_zoo_datetime_with_a_user_tzinfo_changed():
    tz = ShiftTZ(1.0)
    when = datetime.datetime(2020, 1, 1, 12, tzinfo=tz)

    def f(x, when=when):
        return x * (when.utcoffset().total_seconds() / 3600)  # pyright: ignore[reportOptionalMemberAccess]

    g = es.filter_jit(f)
    assert float(g(jnp.ones(()))) == 1.0
    tz.hours = 2.0
    assert float(g(jnp.ones(()))) == 2.0
    twin = datetime.datetime(2020, 1, 1, 12, tzinfo=ShiftTZ(2.0))
    assert key(twin) != key(when) and es.intern(twin) is not when


class SlottedFloat(float):
    __slots__ = ("w",)


class ScaledInt(int):
    scale = 1.0


def test_zoo_builtin_subclasses_slots_and_class_attributes():
    a, b = SlottedFloat(1.0), SlottedFloat(1.0)
    a.w, b.w = 1.0, 2.0
    assert key(a) != key(b) and es.intern(b).w == 2.0
    before = key(a)
    a.w = 3.0
    assert key(a) != before
    n = ScaledInt(1)
    before = key(n)
    ScaledInt.scale = 2.0
    try:
        assert key(n) != before
    finally:
        ScaledInt.scale = 1.0
