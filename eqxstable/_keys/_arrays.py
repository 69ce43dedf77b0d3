"""Keys of NumPy arrays (`K-array-top`, `K-array-reached`): by dtype, shape, memory layout
(`_layout.layout`: C or Fortran order, a view's strides) and bytes, a reached one also by its
identity and watched; an array of Python objects item by item; a subclass of
`np.ndarray` as a `K-mutable` object."""

import hashlib
import weakref
from typing import Any

import numpy as np

from ._bytes import ArrayState, same_bytes
from ._context import compound, Ctx, key
from ._dtypes import dtype_key
from ._layout import layout
from ._mutable import _items
from ._state import (
    extra_attrs,
    protocol_plain,
    slot_values,
    state_of,
    unreadable,
)
from ._types import Identity, MutableKey
from ._watch import size


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
    if content_ok:
        ctx.copied_arrays = True
        if obj.dtype.names is not None:
            # A structured dtype's field names can be assigned in place (`a.dtype.names =
            # ("b", "a")`), on the dtype object the copy `intern` hands out shares with the
            # array it was made from, or on that copy by whoever holds it: never substituted.
            ctx.own_eq = True
        # Its layout too: `W.T` and its C-ordered copy hold equal values, which
        # `np.ravel(a, order="K")`, `a.flags` and `a.strides` read apart (`intern` hands out
        # a copy that keeps it: `_layout.frozen_copy`).
        return (np.ndarray, dtype_key(obj.dtype), obj.shape, obj.tobytes(), layout(obj))
    # Reached through a callable or an object, where it stays the user's mutable array.
    ctx.identity = True
    state, data = _reached(obj)
    ctx.blobs.append((obj, state))
    contents = (np.ndarray, dtype_key(obj.dtype), obj.shape, data, layout(obj))
    return MutableKey(Identity(obj), contents)


# Beyond this many bytes, a reached array's key holds a SHA-256 digest of its bytes rather than
# the bytes (as a jaxpr's constants, `_jaxpr_values._BYTES_HELD`): its identity is in the key
# already, the digest only tells its contents apart, and the one copy is its watch's. SHA-256
# rather than BLAKE2b: where the processor computes it (SHA extensions, on most machines since
# 2017) it is 2 to 3 times faster (100 MB: 0.1 s, BLAKE2b 0.2-0.25 s), and as collision resistant.
_BYTES_HELD = 4096
# `id(array)` -> (its weak reference, a weak reference to its shared state, the digest): the
# copy is held by the strong watches that check it (a wrapper's, a cache entry's), never here.
_big: dict[int, tuple[weakref.ref, weakref.ref, tuple]] = {}


def _reached(obj: np.ndarray) -> tuple[ArrayState, Any]:
    """The watch state and the key part of a reached array's bytes. A large one is copied and
    hashed once while it stays unchanged and a watch holds its copy: a new function reading the
    same array (a loss rebuilt each step) shares its state (one copy in all) and its digest,
    checked in place."""
    if obj.nbytes <= _BYTES_HELD:
        data = obj.tobytes()
        return ArrayState(obj, data), data
    i = id(obj)
    known = _big.get(i)
    if known is not None and known[0]() is obj:
        state = known[1]()
        if state is not None and same_bytes(obj, state):
            return state, known[2]
    data = obj.tobytes()
    state = ArrayState(obj, data, shared=True)
    digest = ("sha256", hashlib.sha256(data).digest())
    try:
        ref = weakref.ref(obj, lambda r, i=i: _forget(i, r))
    except TypeError:
        return state, digest
    _big[i] = (ref, weakref.ref(state), digest)
    return state, digest


def _forget(i: int, ref: weakref.ref, big: dict = _big) -> None:
    known = big.get(i)
    if known is not None and known[0] is ref:
        del big[i]


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
    # Its attributes and slots read from where `type` stores them (`_state.layout`).
    readable = protocol_plain(t)
    ctx.states.append((obj, state_of(readable), state_of(readable)(obj)))
    ctx.blobs.append((obj, ArrayState(plain, data)))
    slots = tuple([(n, key(v, ctx, False)) for n, v in slot_values(obj, readable)])
    attrs = extra_attrs(obj, ctx, watched=True, plain=readable)
    kind = (key(t, ctx, False), dtype_key(obj.dtype), obj.shape)
    contents = (*kind, data, attrs, slots, layout(plain))
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
