"""Row tests of the keys table (`eqxstable/_keys/README.md`, ids in `ROW_TESTS` of
`tests/test_keys_rows.py`) for values keyed by value: plain values, floats, NumPy scalars,
builtin subclasses, ranges, enum members, tuples, frozen dataclasses and modules, decimals, and
`__hash__` without `__eq__`. Each checks its row's promise on equal but distinct objects."""

import dataclasses
import decimal
import enum
from typing import Any, NamedTuple

import equinox as eqx
import numpy as np
import pytest

import eqxstable as es

from .keys_support import body as _body, key, same


# int, bool, str, bytes, None: exact type and value.
def test_plain_values_by_exact_type_and_value():
    assert same(int("123456789"), int("123456789"))
    assert same("".join(["ab", "c"]), "".join(["a", "bc"]))
    assert same(bytes([1, 2]), bytes([1, 2]))
    assert key(1) != key(True) and key(0) != key(False) and key(1) != key(1.0)
    assert key("a") != key(b"a")
    assert key(None) != key(0) and key(None) != key(False)
    assert key(int("123456789")) != key(int("123456788"))


# float, complex: exact type and IEEE bits.
def test_floats_and_complexes_by_bits():
    assert same(float("1.5"), float("1.5"))
    assert key(0.0) != key(-0.0)
    assert same(float("nan"), float("nan"))
    assert same(complex("1+2j"), complex("1+2j"))
    assert key(complex(0.0, 0.0)) != key(complex(0.0, -0.0))
    assert key(complex(0.0, 1.0)) != key(complex(1.0, 0.0))
    assert key(complex(1.0, 0.0)) != key(1.0)


# NumPy scalar: type, full dtype description, bytes.
def test_numpy_scalars_by_type_dtype_and_bytes():
    assert same(np.float32(0.5), np.float32(0.5))
    assert key(np.float32(1)) != key(np.float64(1)) != key(np.int32(1))
    assert key(np.float32(0.0)) != key(np.float32(-0.0))
    # One type, the same bytes, and another dtype: a date in days or in seconds.
    assert key(np.datetime64(1, "D")) != key(np.datetime64(1, "s"))
    assert key(np.timedelta64(1, "D")) != key(np.timedelta64(1, "s"))
    assert same(np.datetime64(1, "D"), np.datetime64(1, "D"))
    # Two 8-byte structured dtypes with the same bytes, only their fields differ.
    a = np.zeros((), dtype=[("a", "<f4"), ("b", "<f4")])[()]
    b = np.zeros((), dtype=[("x", "<f4"), ("y", "<f4")])[()]
    assert a.tobytes() == b.tobytes() and key(a) != key(b)
    # A subclass of a NumPy scalar type has the same dtype, and may compute otherwise.
    sub = type("Scaled", (np.float64,), {"__mul__": lambda self, o: 2 * float(self) * o})
    assert key(sub(1.0)) != key(np.float64(1.0))


class Loose(int):
    """An `int` subclass whose own `==` calls everything equal."""

    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0


class Tagged(float):
    pass


def tagged(value: float, tag: str) -> Tagged:
    out = Tagged(value)
    out.tag = tag  # pyright: ignore[reportAttributeAccessIssue]
    return out


# A subclass of a builtin value: exact type, the builtin value, attributes; its `==` never used.
def test_builtin_subclasses_by_value_and_attributes():
    assert same(Loose(3), Loose(3))
    assert key(Loose(3)) != key(Loose(4))
    assert key(Loose(3)) != key(type("OtherInt", (int,), {})(3))
    assert key(Loose(3)) != key(3)
    assert same(tagged(1.0, "a"), tagged(1.0, "a"))
    assert key(tagged(1.0, "a")) != key(tagged(1.0, "b"))
    assert key(tagged(0.0, "a")) != key(tagged(-0.0, "a"))
    # Its attributes are watched: setting one is a new key.
    t = tagged(1.0, "a")
    before = key(t)
    t.tag = "b"  # pyright: ignore[reportAttributeAccessIssue]
    assert key(t) != before


# range, slice: start, stop, step.
def test_ranges_and_slices_by_start_stop_step():
    assert same(range(0, 4, 2), range(0, 4, 2))
    assert key(range(0, 4, 1)) != key(range(0, 4, 2))
    assert key(range(0, 4)) != key(range(1, 4)) != key(range(0, 5))
    assert key(range(0)) != key(range(2, 2))
    assert same(slice(1, 5, 2), slice(1, 5, 2))
    assert key(slice(1, 5, 1)) != key(slice(1, 5, 2))
    assert key(slice(0, 5)) != key(slice(1, 5)) != key(slice(1, 6))
    assert key(slice(1)) != key(slice(1.0))
    assert key(slice(None, 1)) != key(slice(None, True))


class Color(enum.Enum):
    RED = 1


class Shade(enum.Enum):
    RED = 1


class Perm(enum.IntFlag):
    R = 4
    W = 2


# Enum member: class and value.
def test_enum_members_by_class_and_value():
    assert key(Color.RED) == key(Color(1))
    assert key(Color.RED) != key(Shade.RED)
    assert key(Perm(0)) != key(Perm(8))
    assert key(Perm.R | Perm.W) == key(Perm(6))
    assert key(Perm(6)) != key(6)


class A(NamedTuple):
    x: Any


class B(NamedTuple):
    x: Any


# tuple, NamedTuple, frozenset: exact type, items in iteration order, attributes.
def test_tuples_by_exact_type_and_items():
    assert same(tuple([1.0, "a"]), tuple([1.0, "a"]))
    assert same(A(float("1.0")), A(float("1.0")))
    assert key(A(1.0)) != key(B(1.0))
    assert key(A(1.0)) != key((1.0,))
    assert key((1, 2)) != key((2, 1))
    a, b = A(1.0), B(1.0)
    assert type(es.intern(a)) is A
    assert type(es.intern(b)) is B
    # Items are keyed type-exactly.
    assert key((1,)) != key((1.0,)) and key(A(1)) != key(A(True))
    assert same(frozenset(["a", "b"]), frozenset(["a", "b"]))
    # A NamedTuple is rebuilt by `intern` with read-only arrays; another tuple subclass is not.
    assert not key(A(np.ones(1))).identity
    assert key(type("T", (tuple,), {})([np.ones(1)])).identity
    # Attributes of a tuple or frozenset subclass are part of the key.
    T = type("T", (frozenset,), {})
    t1, t2 = T([1]), T([1])
    t1.tag, t2.tag = "a", "b"  # pyright: ignore[reportAttributeAccessIssue]
    assert key(t1) != key(t2)
    assert key(frozenset([1])) != key(frozenset([True]))


@dataclasses.dataclass(frozen=True)
class Frozen:
    value: Any


class Mod(eqx.Module):
    value: Any


@dataclasses.dataclass(frozen=True)
class Unset:
    value: Any = dataclasses.field(init=False)


# Frozen dataclass, `eqx.Module`: exact class and fields; a library module's own dicts watched.
def test_frozen_dataclasses_and_modules_by_class_and_fields():
    assert same(Frozen(float("2.0")), Frozen(float("2.0")))
    assert key(Frozen(1)) != key(Frozen(1.0))
    assert key(Frozen(1)) != key(Mod(1))
    assert same(Mod((1, "a")), Mod((1, "a")))
    assert key(Mod(1)) != key(Mod(2))
    # A user's array in a field is the user's: by identity (and watched), not by contents.
    a = np.ones(2)
    assert key(Mod(a)) != key(Mod(a.copy())) and key(Mod(a)).identity
    assert key(eqx.Partial(_body, y=a)) != key(eqx.Partial(_body, y=a.copy()))
    # An attribute set beside the fields, and a field never set, are part of the key.
    f1, f2 = Frozen(1), Frozen(1)
    object.__setattr__(f1, "extra", 1)
    assert key(f1) != key(f2)
    assert same(Unset(), Unset())
    none = Unset()
    object.__setattr__(none, "value", None)
    assert key(Unset()) != key(none)
    # `eqx.Partial.keywords` is the partial's own dict: by value, and watched.
    assert same(eqx.Partial(_body, y=1), eqx.Partial(_body, y=1))
    assert same(eqx.Partial(_body, y=(1, 2)), eqx.Partial(_body, y=(1, 2)))
    p = eqx.Partial(_body, y=1)
    before = key(p)
    p.keywords["y"] = 2
    assert key(p) != before
    assert key(p) == key(eqx.Partial(_body, y=2))


# `Decimal`: sign, digits and exponent.
def test_decimals_by_sign_digits_and_exponent():
    assert same(decimal.Decimal("1.5"), decimal.Decimal("1.5"))
    assert decimal.Decimal("1.00") == decimal.Decimal("1.0")
    assert key(decimal.Decimal("1.00")) != key(decimal.Decimal("1.0"))
    assert key(decimal.Decimal("1.5")) != key(decimal.Decimal("-1.5"))


class OnlyHash:
    def __hash__(self):
        return 0


# `__hash__` without `__eq__`: identity, with a warning.
def test_hash_without_eq_is_identity_with_a_warning():
    a, b = OnlyHash(), OnlyHash()
    with pytest.warns(es.StabilityWarning, match="OnlyHash"):
        ka = key(a)
    with pytest.warns(es.StabilityWarning, match="OnlyHash"):
        kb = key(b)
    assert ka != kb and ka.identity
