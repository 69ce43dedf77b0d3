"""Keys of NumPy dtypes (`K-dtype`): everything code can observe of one, never its `==`.

NumPy calls `np.dtype(fields)` and `np.dtype(fields, align=True)` equal (and hashes them alike),
yet they differ in `alignment`, `isalignedstruct`, `repr` and the layout of any struct built from
them; its `==` also leaves out metadata. A dtype's key is therefore its whole description, read
attribute by attribute (`describe`): its class, `str`, byte order, item size, alignment, flags,
kind, character code, number, scalar type, every field in order (name, dtype, offset, title),
its subarray's base and shape, and its metadata. No cache here is looked up by a dtype's `==`:
the key of a dtype that cannot change (no fields, no subarray, no metadata) is remembered by its
`id`, the dtype held with it and compared by `is`.
"""

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ._per_class import type_ids


class Unknown(Exception):
    """A part of a dtype that `plain` cannot key (a metadata value that is an object)."""


# What a dtype's metadata, titles or `na_object` may hold to be keyed without a computation:
# exact scalars, by type and value (a float by its bits), and tuples of them.
_SCALARS = type_ids((int, str, bytes, bool, type(None)))


def plain(x: Any) -> Any:
    """`x` keyed by its exact type and value if it is a plain scalar or a tuple of them; else
    `Unknown`."""
    t = type(x)
    if id(t) in _SCALARS:
        return (t, x)
    if t is float:
        return (float, struct.pack("<d", x))
    if t is complex:
        return (complex, struct.pack("<dd", x.real, x.imag))
    if t is tuple:
        return (tuple, tuple([plain(y) for y in x]))
    raise Unknown


# NumPy's own scalar types, the `type` of every dtype NumPy makes itself, by identity.
_NUMPY_SCALARS = type_ids({*np.sctypeDict.values(), np.record, np.void, str, bytes, object})
_STRING_DTYPE: Any = getattr(getattr(np, "dtypes", None), "StringDType", None)


def describe(dt: np.dtype, other: Callable[[Any], Any]) -> tuple:
    """Everything code can read of `dt`, as a hashable tuple; `other` keys what is not NumPy's
    own (a metadata value, a title that is not a `str`, a user's scalar type, `na_object`), or
    raises `Unknown`.

    **Arguments:**

    - `dt`: the dtype.
    - `other`: `plain`, or a computation's `key`.

    **Returns:**

    The description: two dtypes with equal descriptions are the same dtype in every way code can
    observe.
    """
    t = type(dt)
    if not getattr(t, "_legacy", True):
        # A new-style dtype (NumPy >= 2): only `StringDType` is known, by its two settings.
        if _STRING_DTYPE is None or t is not _STRING_DTYPE:
            raise Unknown
        sdt: Any = dt
        na = (other(sdt.na_object),) if hasattr(sdt, "na_object") else ()
        return (t, sdt.coerce, na, dt.str, dt.itemsize, dt.alignment)
    scalar = dt.type
    # Not `isbuiltin`: whether this is NumPy's shared instance (a dtype unpickled is another
    # object), which nothing NumPy computes depends on; a user's legacy DType (`isbuiltin == 2`)
    # has a scalar type of its own, which `other` keys.
    parts: list[Any] = [
        t,
        dt.str,
        dt.byteorder,
        dt.itemsize,
        dt.alignment,
        dt.flags,
        dt.isalignedstruct,
        dt.kind,
        dt.char,
        dt.num,
        scalar if id(scalar) in _NUMPY_SCALARS else other(scalar),
    ]
    names = dt.names
    if names is not None:
        fields = dt.fields
        assert fields is not None
        described = []
        for name in names:
            field = fields[name]
            title = field[2:]
            if title and type(title[0]) is not str:
                title = (other(title[0]),)
            described.append(
                (name if type(name) is str else other(name), _part(field[0], other), field[1])
                + title
            )
        parts.append(tuple(described))
    sub = dt.subdtype
    if sub is not None:
        parts.append(("subarray", _part(sub[0], other), sub[1]))
    meta = dt.metadata
    if meta is not None:
        parts.append(("metadata", tuple([(other(k), other(v)) for k, v in meta.items()])))
    elif names is None and sub is None:
        # NumPy's own text for a plain dtype (no user object in it): a safety net, cached.
        parts.append(repr(dt))
    return tuple(parts)


def _part(dt: np.dtype, other: Callable[[Any], Any]) -> tuple:
    # A field's or a subarray's dtype: one that cannot change is described once (`dtype_key`;
    # `other` is never called for it), for `repr` costs microseconds.
    return dtype_key(dt) if fixed(dt) else describe(dt, other)


def fixed(dt: np.dtype) -> bool:
    """Whether nothing of `dt` can change: no fields (`names` can be assigned), no subarray
    (its base may have fields), no metadata (it may hold anything), a dtype NumPy made itself."""
    return (
        dt.names is None
        and dt.subdtype is None
        and dt.metadata is None
        and getattr(type(dt), "_legacy", True)
        and id(dt.type) in _NUMPY_SCALARS
    )


# The keys of dtypes that cannot change, by `id`, each with its dtype (held, so that its `id`
# is never another's, and compared by `is`). Plain dtypes are few (NumPy shares them); cleared
# when dtypes made afresh (`S5`, `datetime64[ns]`) fill it.
_FIXED: dict[int, tuple[np.dtype, tuple]] = {}


class _Never:
    """A key part equal to nothing but itself: a dtype whose description holds an object that
    only a computation can key (`dtype_key` has none); each call makes a new one, so a reader of
    such a dtype's array is keyed afresh each time (a recompile, never a wrong answer)."""

    __slots__ = ()


def dtype_key(dt: np.dtype) -> Any:
    """The key of `dt` without a computation: `describe` with `plain`, remembered for a dtype
    that cannot change."""
    known = _FIXED.get(id(dt))
    if known is not None and known[0] is dt:
        return known[1]
    try:
        described = describe(dt, plain)
    except Unknown:
        return ("dtype", _Never())
    if fixed(dt):
        if len(_FIXED) > 1024:
            _FIXED.clear()
        _FIXED[id(dt)] = (dt, described)
    return described


def all_names(dt: np.dtype) -> tuple:
    """The `names` of `dt` and of every structured dtype inside it, in order: each can be
    assigned in place (`dt.names = ...`), which changes `dt` and whatever holds it. NumPy returns
    the same tuple until it is assigned, so a watch compares them by `is`."""
    out: list[Any] = []
    pending = [dt]
    while pending:
        d = pending.pop()
        names = d.names
        out.append(names)
        if names is not None:
            fields = d.fields
            assert fields is not None
            pending.extend(fields[n][0] for n in names)
        if d.subdtype is not None:
            pending.append(d.subdtype[0])
    return tuple(out)
