"""The values a jaxpr holds in its literals and constants, keyed by their exact type and bits
(`K-jaxpr`): a Python scalar (JAX's typed ones included) by its IEEE bits and dtype, never by its
`==`; an array by its type, dtype, shape and bytes (a digest beyond 4 KiB); and whether such an
array can be written in place (`may_change`), so that the keys layer watches it.

Used by `_jaxpr.py`, which keys the equations around them.
"""

import enum
import hashlib
import struct
from collections.abc import Callable, Hashable
from typing import Any

import jax
import numpy as np

from ._per_class import type_ids


class Unkeyable(Exception):
    """Raised where a jaxpr cannot be keyed by value; `jaxpr_key` then gives `None`."""


# `(dtype.str, dtype.name)` by the dtype's identity, held with it: NumPy computes `name` in Python
# on every read, and a jaxpr's literals share a few dtypes.
_DTYPE_NAMES: dict[int, tuple[np.dtype, tuple[str, str]]] = {}


def _dtype_names(dtype: np.dtype) -> tuple[str, str]:
    known = _DTYPE_NAMES.get(id(dtype))
    if known is None or known[0] is not dtype:
        if len(_DTYPE_NAMES) > 1024:  # Dtypes made afresh (structured ones): no growth.
            _DTYPE_NAMES.clear()
        known = _DTYPE_NAMES[id(dtype)] = (dtype, (dtype.str, dtype.name))
    return known[1]


try:  # JAX >= 0.8 (measured on 0.10): a Python scalar in a jaxpr carries its dtype.
    from jax._src.literals import typed_scalar_types as _typed

    _TYPED_SCALARS: frozenset[int] = type_ids(_typed)
except ImportError:  # JAX 0.5.3 (the floor) puts plain `int`/`float`/`complex` in literals.
    _TYPED_SCALARS = frozenset()
# Python's own scalars, keyed exactly here whatever the caller's `key_of` does with them. By
# identity (`type_ids`), as the sets above and below: a metaclass may call its class `int`.
_PLAIN_SCALARS = type_ids((bool, int, float, complex))


def scalar_key(value: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    """A Python scalar (JAX's typed ones included) by its exact type (a builtin or JAX's class,
    constant), its exact value (a float's or a complex's IEEE bits: `0.0` and `-0.0`, two NaN
    payloads differ) and, for JAX's typed scalars, its dtype; `None` for anything else (a NumPy
    scalar is an array, an enum member is the caller's). JAX's `TypedFloat(-0.0) ==
    TypedFloat(0.0)`, so a key by its `==` would run a program compiled for `1 / -0.0` where
    `1 / 0.0` was traced. Another subclass of a number (state this does not know of) makes the
    jaxpr unkeyable."""
    t = type(value)
    if id(t) in _PLAIN_SCALARS:
        dtype: Hashable = None
    elif id(t) in _TYPED_SCALARS:
        # `aval` is derived from `dtype` (always weakly typed); `dtype` is keyed as what it is.
        dtype = key_of(value.dtype)
    elif isinstance(value, (np.generic, enum.Enum)):
        return None
    elif isinstance(value, (int, float, complex)):
        raise Unkeyable
    else:
        return None
    if isinstance(value, float):
        bits: Hashable = struct.pack("<d", value)
    elif isinstance(value, complex):
        bits = struct.pack("<dd", value.real, value.imag)
    else:
        bits = int(value)
    return ("python scalar", t, bits, dtype)


# Bytes of a constant held as they are in a key up to this size; a digest beyond it.
_BYTES_HELD = 4096


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def value_key(
    value: Any,
    key_of: Callable[[Any], Hashable],
    changeable: Callable[[Any, bytes], None] | None = None,
) -> Hashable:
    """A literal's or a constant's value: a Python scalar (`scalar_key`) by its exact type, bits and
    dtype; an array (JAX's, NumPy's, or the array type JAX wraps literals in) by its exact type,
    dtype, shape and bytes, handed to `changeable` as well where it can be written in place;
    anything else by `key_of`."""
    found = scalar_key(value, key_of)
    if found is not None:
        return found
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        if changeable is not None and not isinstance(value, (np.ndarray, np.generic, jax.Array)):
            # An array type this does not know: its bytes may not be all its state.
            raise Unkeyable
        try:
            array = np.asarray(value)
        except Exception as e:
            raise Unkeyable from e
        if array.dtype.hasobject:
            raise Unkeyable
        data = array.tobytes()
        if changeable is not None and may_change(value):
            changeable(value, data)
        # The name as well as `dtype.str`, which is `<V2` for bfloat16 and every other 2-byte
        # extension type. Large values by a cryptographic digest of their bytes: a key is held
        # as long as its program, and a copy of every large constant would double its memory.
        held = data if len(data) <= _BYTES_HELD else ("blake2b", _digest(data))
        return ("array", key_of(type(value)), *_dtype_names(array.dtype), array.shape, held)
    return key_of(value)


try:  # JAX >= 0.8 wraps a literal's NumPy value in its own subclass (no state of its own but
    # the abstract value, keyed beside it).
    from jax._src.literals import TypedNdArray as _TypedNdArray

    _PLAIN_ARRAYS: frozenset[int] = type_ids((np.ndarray, _TypedNdArray))
except ImportError:  # JAX 0.5.3 (the floor) holds plain NumPy arrays.
    _PLAIN_ARRAYS = type_ids((np.ndarray,))


def may_change(value: Any) -> bool:
    """Whether a literal's or a constant's array can be written in place, now or later.

    A `jax.Array` cannot, nor a NumPy scalar (but a record, `np.void`). A NumPy array can,
    unless it and every array it views are read-only and its memory belongs to a `bytes` object
    (a read-only array that owns its memory can be made writable again by whoever holds it).
    JAX keeps a NumPy value it traces by reference: a 0-d array the traced function closes over
    is itself the literal (JAX 0.5.3) or viewed by it (0.10), so writing the user's array
    changes what the jaxpr computes, even run eagerly; and the `1.0` of `x + 1.0`, which JAX
    makes afresh and never writes, cannot be told apart from it. Any other array type (a
    subclass may hold state of its own) can."""
    if isinstance(value, jax.Array):
        return False
    if isinstance(value, np.generic):
        # A NumPy scalar is immutable, but for a structured one (`np.void`), a view of a record.
        return isinstance(value, np.void)
    if id(type(value)) not in _PLAIN_ARRAYS:
        return True
    a: Any = value
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return True
        a = a.base
    return type(a) is not bytes
