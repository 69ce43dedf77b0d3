"""The NumPy array that equal static values share (`StableModule` static field, `es.stabilize`
of a plain module, `es.intern`) cannot be changed by any means through one holder: its memory is
an immutable `bytes` object, and each `StableModule` read and `intern` call gets a view of its
own (`eqxstable/_module/_arrays.py`), whose `shape`/`dtype`/`strides` assigned in place change
only that view and make the next read of the field raise. Attack round 11c, findings 09 and 10
(`flags.writeable = True`, `a.shape = ...` changed every other module's value), 03 and 05
(`intern` of containers holding arrays, and of tuple DAGs)."""

import sys
from typing import Any

import equinox as eqx
import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import eqxstable as es


# Equinox warns about any array in a static field of its own modules (the plain ones here).
# NumPy 2.4 deprecates assigning `strides` (the attack uses it all the same).
pytestmark = [
    pytest.mark.filterwarnings("ignore:A JAX array is being set as static"),
    pytest.mark.filterwarnings("ignore:Setting the .* on a NumPy array:DeprecationWarning"),
]


class Stable(es.StableModule):
    table: Any = eqx.field(static=True)

    def __call__(self, x):
        return x * jnp.asarray(_array_of(self.table)).sum()


class Plain(eqx.Module):
    table: Any = eqx.field(static=True)

    def __call__(self, x):
        return x * jnp.asarray(_array_of(self.table)).sum()


def _array_of(table: Any) -> np.ndarray:
    return table if isinstance(table, np.ndarray) else table[0]


# Where the array is held, and how that holder's code reads it back.
PLACES = {
    "StableModule field": (lambda a: Stable(a), lambda m: m.table),
    "StableModule list": (lambda a: Stable([a]), lambda m: m.table[0]),
    "StableModule tuple": (lambda a: Stable((a, 1)), lambda m: m.table[0]),
    "stabilize field": (lambda a: es.stabilize(Plain(a)), lambda m: m.table),
    "stabilize tuple": (lambda a: es.stabilize(Plain((a, 1))), lambda m: m.table[0]),
    "intern": (lambda a: es.intern(a), lambda m: m),
}


def _set(name: str, value: Any):
    return lambda a: setattr(a, name, value)


# Every NumPy way to change an array in place that does not go through an item write.
CHANGES = {
    "writeable": lambda a: setattr(a.flags, "writeable", True),
    "setflags": lambda a: a.setflags(write=True),
    "shape": lambda a: setattr(a, "shape", (1, a.size)),
    "dtype": lambda a: setattr(a, "dtype", np.int8),
    "strides": lambda a: setattr(a, "strides", (0,) * a.ndim),
    "resize": lambda a: a.resize((a.size + 1,), refcheck=False),
    "copyto": lambda a: np.copyto(a, 7),
    "setitem": lambda a: a.__setitem__(..., 7),
    "base writeable": lambda a: setattr(a.base.flags, "writeable", True),
    "base shape": lambda a: setattr(a.base, "shape", (1, a.size)),
    "writeable then write": lambda a: (setattr(a.flags, "writeable", True), a.fill(7)),
}

DTYPES = [np.float64, np.float32, np.int32, np.int64, np.complex64, np.bool_]


def _read(place: str, holder: Any) -> Any:
    return PLACES[place][1](holder)


@settings(max_examples=60, deadline=None)
@given(
    place=st.sampled_from(sorted(PLACES)),
    change=st.sampled_from(sorted(CHANGES)),
    dtype=st.sampled_from(DTYPES),
    size=st.integers(2, 5),
)
def test_one_holder_cannot_change_another_holders_array(place, change, dtype, size):
    make, _ = PLACES[place]
    original = np.arange(1, size + 1).astype(dtype)
    mine, other = make(original.copy()), make(original.copy())
    try:
        CHANGES[change](_read(place, mine))
    except (ValueError, TypeError, AttributeError):
        pass  # Refused at the change: as the contract asks.
    # Every other holder, and one made afterwards from equal bytes, reads the value as given.
    for holder in (other, make(original.copy())):
        got = _read(place, holder)
        assert type(got) is np.ndarray or isinstance(got, np.ndarray)
        assert got.dtype == original.dtype and got.shape == original.shape
        np.testing.assert_array_equal(got, original)
        assert not got.flags.writeable
    if place == "intern":
        return  # The caller changed its own view, as it may change any array of its own.
    # The holder changed: its next read is the value or a clear error, never another value.
    try:
        got = _read(place, mine)
    except TypeError as e:
        assert "changed in place" in str(e)
    else:
        np.testing.assert_array_equal(np.asarray(got), original)
        assert got.shape == original.shape and got.dtype == original.dtype


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("place", [p for p in PLACES if p != "intern"])
def test_another_module_computes_as_equinox_eagerly_and_under_filter_jit(place, change):
    make, read = PLACES[place]
    original = np.array([1.0, 2.0])
    table = original if "field" in place else ((original, 1) if "tuple" in place else [original])
    want = Plain(table)(jnp.ones(2))
    mine, other = make(original.copy()), make(original.copy())
    try:
        CHANGES[change](read(mine))
    except (ValueError, TypeError, AttributeError):
        pass
    for module in (other, make(original.copy())):
        np.testing.assert_array_equal(module(jnp.ones(2)), want)
        out = eqx.filter_jit(lambda m, x: m(x))(module, jnp.ones(2))
        assert out.shape == want.shape
        np.testing.assert_array_equal(out, want)


@pytest.mark.counts_traces
def test_rebuilt_modules_with_equal_arrays_share_one_program():
    traces = 0

    @eqx.filter_jit
    def f(m, x):
        nonlocal traces
        traces += 1
        return m(x)

    for _ in range(3):
        m = Stable(np.array([1.0, 2.0]))
        assert float(f(m, jnp.ones(()))) == 3.0
    assert traces == 1


def test_intern_of_an_array_is_a_read_only_view_equal_to_it():
    a = np.array([1.0, 2.0])
    first, second = es.intern(a), es.intern(a.copy())
    assert first is not a and first is not second
    np.testing.assert_array_equal(first, a)
    first.shape = (2, 1)  # Its own view: the next caller's is untouched.
    assert second.shape == (2,) and es.intern(a).shape == (2,)


@pytest.mark.parametrize("make", [lambda: np.array(float("nan")), lambda: np.array([1.0, 2.0])])
@pytest.mark.parametrize("container", [lambda a: (a,), lambda a: (a, "x"), lambda a: ((a,), 1)])
def test_intern_of_a_container_holding_an_array_is_equal_to_it(make, container):
    # Python compares items by `is` first: a container holding a copy of the array is not `==`
    # to the user's (a NaN array is unequal, a 2-element one cannot be compared at all).
    t = container(make())
    assert es.intern(t) is t
    assert es.intern(t) == t


@pytest.mark.parametrize("array", [False, True])
def test_intern_of_a_tuple_dag_is_linear_in_its_objects(array):
    t: Any = (np.ones(2),) if array else (1.5,)
    es.intern((t, t))  # The first call's imports are not the walk.
    for _ in range(24):
        t = (t, t)  # 25 objects, 2**24 paths (a minute's walk before the fix).
    calls = 0

    def profile(frame, event, arg):
        # Counted, not timed: a walk of every path makes millions of calls; stop it early.
        nonlocal calls
        calls += 1
        if calls > 20_000:
            raise RuntimeError("intern walks the paths, not the objects")

    sys.setprofile(profile)
    try:
        out = es.intern(t)
    finally:
        sys.setprofile(None)
    assert out == t if not array else out is t
