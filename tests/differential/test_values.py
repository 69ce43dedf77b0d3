"""Differential situations: static values whose `==` lies about how they behave in a trace
(type-exact keys, signed zeros, NaN bits, subclasses with their own `==`, NumPy values,
NamedTuple subclasses, enum flags, PyTreeDefs), mostly held in a static field (`box=True`)."""

import decimal
import enum
import fractions
import math
import struct
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

from .harness import check, MODES, Situations


SITUATIONS = Situations()


# Made in each call: a JAX array made at import starts JAX's backend while the tests are
# collected, which the mutation run's fork server must not do (tests/README.md).
def _ints():
    return jnp.array([1, 2], dtype=jnp.int32)


def _times(c, x):
    return x * c


def _times_with_dtype(c, x):
    return x * c, jnp.asarray(c)


def _sign(c, x):
    return x + math.copysign(1.0, c)


def _scale_by(c, x):
    return x * c.scale


@SITUATIONS.add
def one_float_bool_int32(h):
    """`1`, `1.0`, `True` and `np.int32(1)`: four keys, four dtypes."""
    x = jnp.array([1, 2], dtype=jnp.uint8)
    for c in (1, 1.0, True, np.int32(1), 1):
        h.call(c, x, apply=_times_with_dtype)


@SITUATIONS.add
def one_float_bool_in_a_static_field(h):
    for c in (1, 1.0, True):
        h.call(c, _ints(), apply=_times_with_dtype, box=True)


@SITUATIONS.add
def int_then_bool_in_a_tuple(h):
    apply = lambda c, x: (x * c[1], jnp.asarray(c[0]))  # noqa: E731
    for c in ((1, 2), (True, 2)):
        h.call(c, _ints(), apply=apply, box=True)


@SITUATIONS.add
def signed_zero(h):
    for c in (0.0, -0.0, 0.0):
        h.call(c, jnp.ones(2), apply=_sign)


@SITUATIONS.add
def signed_zero_in_complex(h):
    apply = lambda c, x: x + math.copysign(1.0, c.imag)  # noqa: E731
    for c in (complex(1.0, 0.0), complex(1.0, -0.0)):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def signed_zero_in_frozenset(h):
    """`frozenset({0.0}) == frozenset({-0.0})`, yet the element read back has its sign."""
    apply = lambda c, x: _sign(next(iter(c)), x)  # noqa: E731
    for c in (frozenset({0.0}), frozenset({-0.0})):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def nan_payload_bits(h):
    """Two NaNs with different payloads: the trace reads the bits."""
    nans = [struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | k))[0] for k in (1, 2)]
    apply = lambda c, x: x * struct.pack("<d", c)[0]  # noqa: E731
    for c in nans:
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def float_subclass_negative_zero(h):
    class MyFloat(float):
        pass

    for c in (MyFloat(0.0), MyFloat(-0.0)):
        h.call(c, jnp.ones(2), apply=_sign, box=True)


@SITUATIONS.add
def float_subclass_with_its_own_eq(h):
    class Approx(float):
        def __eq__(self, other):
            return abs(float(self) - float(other)) < 1.0

        def __hash__(self):
            return 0

    apply = lambda c, x: x * float(c)  # noqa: E731
    for c in (Approx(1.0), Approx(1.5)):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def complex_subclass_with_its_own_eq(h):
    class RealOnly(complex):
        def __eq__(self, other):
            return self.real == complex(other).real

        def __hash__(self):
            return hash(self.real)

    apply = lambda c, x: x * c.imag  # noqa: E731
    for c in (RealOnly(1, 1), RealOnly(1, 2)):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def frozenset_subclass_with_its_own_eq(h):
    class BySize(frozenset):
        def __eq__(self, other):
            return len(self) == len(other)

        def __hash__(self):
            return len(self)

    apply = lambda c, x: x * sum(c)  # noqa: E731
    for c in (BySize({1.0}), BySize({2.0})):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def str_subclass_case_insensitive(h):
    class Name(str):
        def __eq__(self, other):
            return self.lower() == str(other).lower()

        def __hash__(self):
            return hash(self.lower())

    apply = lambda c, x: jnp.maximum(x, 0.0) if c.islower() else x  # noqa: E731
    for c in (Name("relu"), Name("RELU")):
        h.call(c, jnp.array([-1.0, 2.0]), apply=apply, box=True)


@SITUATIONS.add
def numpy_float64_is_a_float_subclass(h):
    """`np.float64(2.0) == 2.0` with the same hash, but it is not weakly typed."""
    x = jnp.array([1.0, 2.0], dtype=jnp.bfloat16)
    for c in (2.0, np.float64(2.0)):
        h.call(c, x, apply=_times, box=True)


@SITUATIONS.add
def decimal_precision(h):
    """`Decimal('1.00') == Decimal('1.0')`, but the exponent differs."""
    apply = lambda c, x: x * -c.as_tuple().exponent  # noqa: E731
    for c in (decimal.Decimal("1.00"), decimal.Decimal("1.0")):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def fraction_vs_float(h):
    apply = lambda c, x: x * (2.0 if isinstance(c, fractions.Fraction) else 3.0)  # noqa: E731
    for c in (fractions.Fraction(1, 2), 0.5):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def big_ints(h):
    apply = lambda c, x: x * (c % 5)  # noqa: E731
    for c in (2**70, 2**70 + 1):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def numpy_mask_compared_elementwise(h):
    """A NumPy value in a static field: `mask == 1` must stay elementwise."""
    x = jnp.array([1.0, 2.0, 3.0])
    apply = lambda c, x: jnp.where(c == 1, x, 0.0)  # noqa: E731
    for c in (np.array([1, 0, 1]), np.array([0, 1, 1])):
        h.call(c, x, apply=apply, box=True)


@SITUATIONS.add
def numpy_same_bytes_other_dtype(h):
    apply = lambda c, x: x + c  # noqa: E731
    for c in (np.zeros(2, np.int32), np.zeros(2, np.float32)):
        h.call(c, _ints(), apply=apply, box=True)


@SITUATIONS.add
def numpy_structured_dtypes_with_equal_bytes(h):
    first = np.array([(1, 2)], dtype=[("a", "<i4"), ("b", "<i4")])
    second = np.array([(1, 2)], dtype=[("b", "<i4"), ("a", "<i4")])
    assert first.tobytes() == second.tobytes()
    apply = lambda c, x: x * int(c["a"][0])  # noqa: E731
    for c in (first, second):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def numpy_scalar_precisions(h):
    for c in (np.float16(2.0), np.float32(2.0)):
        h.call(c, jnp.ones(2), apply=_times_with_dtype, box=True)


@SITUATIONS.add
def bytearray_mutated(h):
    b = bytearray(b"\x02")
    apply = lambda c, x: x * c[0]  # noqa: E731
    h.call(b, jnp.ones(2), apply=apply, box=True)
    b[0] = 5
    h.call(b, jnp.ones(2), apply=apply, box=True)


class Point(NamedTuple):
    a: float


class Tagged(Point):
    """A NamedTuple subclass: its instances have a `__dict__`."""


@SITUATIONS.add
def namedtuple_subclass_instance_attributes(h):
    apply = lambda c, x: x * c.a * c.extra  # noqa: E731
    for extra in (2.0, 3.0):
        c = Tagged(1.0)
        c.extra = extra  # pyright: ignore[reportAttributeAccessIssue]
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def namedtuple_vs_tuple(h):
    apply = lambda c, x: x * (c[0] if hasattr(c, "_fields") else 5.0)  # noqa: E731
    for c in (Point(2.0), (2.0,)):
        h.call(c, jnp.ones(2), apply=apply, box=True)


class Perm(enum.IntFlag):
    R = 4
    W = 2
    X = 1


@SITUATIONS.add
def intflag_pseudo_members(h):
    """`Perm(0)` and `Perm(8)` are pseudo-members: no name, different values."""
    apply = lambda c, x: x * int(c)  # noqa: E731
    for c in (Perm(0), Perm(8), Perm.R | Perm.W):
        h.call(c, jnp.ones(2), apply=apply, box=True)


class Act(enum.Enum):
    A = 1.0
    B = 2.0


@SITUATIONS.add
def enum_members(h):
    apply = lambda c, x: x * c.value  # noqa: E731
    for c in (Act.A, Act.B):
        h.call(c, jnp.ones(2), apply=apply)


@SITUATIONS.add
def enum_member_attribute_mutated(h):
    """An enum member is one object for the process; an attribute set on it can change."""

    class Mode(enum.Enum):
        FAST = "fast"

    Mode.FAST.scale = 2.0  # pyright: ignore[reportAttributeAccessIssue]
    h.call(Mode.FAST, jnp.ones(2), apply=_scale_by)
    Mode.FAST.scale = 3.0  # pyright: ignore[reportAttributeAccessIssue]
    h.call(Mode.FAST, jnp.ones(2), apply=_scale_by)


class Scalar(eqx.Module):
    k: float = eqx.field(static=True)


@SITUATIONS.add
def pytreedef_as_a_value(h):
    """A PyTreeDef compares its node data with `==`: `1` and `1.0` collide."""
    apply = lambda t, x: x * jtu.tree_unflatten(t, []).k  # noqa: E731
    for k in (1, 1.0):
        h.call(jtu.tree_structure(Scalar(k)), _ints(), apply=apply, box=True)


@SITUATIONS.add
def dict_order_in_a_static_field(h):
    """Equal dicts, different order: a trace that iterates reads the order."""
    apply = lambda c, x: x * next(iter(c.values()))  # noqa: E731
    for c in ({"a": 1.0, "b": 2.0}, {"b": 2.0, "a": 1.0}):
        h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def list_in_a_static_field_changed_length(h):
    h.static_copies = True  # A `StableModule` holds a read-only copy (harness docstring).
    c = [1.0]
    apply = lambda c, x: x * len(c)  # noqa: E731
    h.call(c, jnp.ones(2), apply=apply, box=True)
    c.append(2.0)
    h.call(c, jnp.ones(2), apply=apply, box=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_value(situation, mode):
    check(situation, mode)
