"""Keys of NumPy arrays (`K-array-top`, `K-array-reached`): by dtype, shape and bytes, a reached
one also by its identity and watched; an array of Python objects item by item; a subclass of
`np.ndarray` as a `K-mutable` object."""

import functools as ft
from typing import Any

import numpy as np

from ._context import compound, Ctx, key
from ._mutable import _items
from ._state import extra_attrs, object_state, slots_of, unreadable
from ._types import Identity, MutableKey
from ._watch import ArrayState, MISSING, size


@ft.lru_cache(maxsize=1024)
def _dtype_key(dtype: np.dtype) -> Any:
    # The full description: `str` alone says `|V8` for every 8-byte structured dtype.
    return (dtype.str, repr(dtype), dtype.isalignedstruct)


def dtype_key(dtype: np.dtype) -> Any:
    try:
        return _dtype_key(dtype)
    except TypeError:
        return repr(dtype)


def _c_base(t: type) -> type:
    """The nearest class in `t`'s MRO written in C (not a heap type): the one holding its state."""
    return next(c for c in t.__mro__ if not c.__flags__ & _HEAPTYPE)


_HEAPTYPE = 1 << 9


def ndarray(obj: np.ndarray, ctx: Ctx, content_ok: bool) -> Any:
    if obj.dtype.hasobject:
        if obj.dtype.names is not None:
            # A structured dtype with an object field: its bytes are pointers, and its records
            # read back as Python values lose what a field's bytes hold (`S` strips trailing
            # NULs). Its reader is identity-keyed (`K-opaque`), never shared.
            return unreadable(obj, ctx)
        return object_array(obj, ctx, content_ok)
    contents = (np.ndarray, dtype_key(obj.dtype), obj.shape, obj.tobytes())
    if content_ok:
        ctx.copied_arrays = True
        return contents
    # Reached through a callable or an object, where it stays the user's mutable array.
    ctx.identity = True
    ctx.blobs.append((obj, ArrayState(obj, contents[3])))
    return MutableKey(Identity(obj), contents)


@compound
def ndarray_subclass(obj: np.ndarray, ctx: Ctx, content_ok: bool) -> Any:
    """`K-mutable`: a subclass of `np.ndarray` (`np.memmap`, `np.ma.MaskedArray`, a user's) is
    itself, its bytes, shape and dtype watched as a reached array's are (read through a plain
    view: a masked array's `tobytes` fills what it masks), its class keyed as a class (its
    methods run in the trace) and its attributes (a mask, a file's map) and slots as what they
    are. One with Python objects for items, or a C base that is not `np.ndarray`: `K-opaque`."""
    t = type(obj)
    if obj.dtype.hasobject or _c_base(t) is not np.ndarray:
        return unreadable(obj, ctx)
    plain = np.ndarray.view(obj, np.ndarray)
    data = plain.tobytes()
    ctx.identity = True
    ctx.states.append((obj, object_state, object_state(obj)))
    ctx.blobs.append((obj, ArrayState(plain, data)))
    slots = tuple((n, key(getattr(obj, n, MISSING), ctx, False)) for n in slots_of(t))
    attrs = extra_attrs(obj, ctx, watched=True)
    contents = (key(t, ctx, False), dtype_key(obj.dtype), obj.shape, data, attrs, slots)
    return MutableKey(Identity(obj), contents)


def _object_state(a: np.ndarray) -> tuple:
    # The dtype object and the shape (`a.shape = (2, 1)` keeps the items), then the items
    # themselves, which an object array holds as references (`tolist` returns those very objects).
    return (a.dtype, *map(size, a.shape), *a.ravel().tolist())


@compound
def object_array(obj: np.ndarray, ctx: Ctx, content_ok: bool) -> Any:
    """`K-array-reached`, `K-array-top`: an array of dtype `object`. Its bytes are pointers, so
    it is never keyed by them: it is itself (identity, never substituted) and each item keyed as
    what it is (a list by identity and contents, a user object by its attributes), watched; an
    item holding the array itself is a cycle like any other."""
    ctx.identity = True
    ctx.states.append((obj, _object_state, _object_state(obj)))
    items = _items(obj.ravel().tolist(), ctx)
    return MutableKey(Identity(obj), (dtype_key(obj.dtype), obj.shape, items))
