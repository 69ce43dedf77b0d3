"""One read-only NumPy array per dtype, shape, layout and bytes: the array a static value holds,
in either form (a plain `np.ndarray` for a `StableModule`, a `CanonicalArray` for a plain module).
It keeps the layout of the array it was made from (`_keys/_layout.py`: C or Fortran order, a
view's very strides), which code reads (`np.ravel(a, order="K")`, `a.flags`, `a.strides`): `W.T`
reads back Fortran-ordered, and is not its C-ordered copy's array.

Equal static values share that array, so nothing may change it: its memory is a `bytes` object
(NumPy refuses `flags.writeable = True` and `setflags(write=True)` for an array over memory it
cannot write, and `resize` for one that does not own its memory), and it is handed out to no
one. A `StableModule`'s code, and a caller of `intern`, get a view of their own
([`own_view`][]), so that `view.shape = ...`, `view.dtype = ...` or `view.strides = ...`
(which NumPy allows on a read-only array) change only that holder's view, which its next read
checks ([`intact`][]); a `CanonicalArray` refuses them itself (`_canonical.py`).
"""

import copy as _copy
import threading
import weakref
from typing import Any

import numpy as np

from .._keys._dtypes import all_names, dtype_key
from .._keys._layout import frozen_copy, layout, offset
from ._canonical import CanonicalArray


_arrays: dict[tuple, list[weakref.ref]] = {}
# Reentrant: a weak reference callback (`_drop_array`) may run, through garbage collection, on
# a thread that already holds it.
_lock = threading.RLock()


def _array_parts(a: np.ndarray) -> tuple:
    # The dtype's whole description (`dtype_key`), not `dtype.str` (`int4` and `uint4`, and
    # structured dtypes with other fields, share a `str`) nor the dtype's `==` (a packed and an
    # aligned struct are equal, and differ in layout); and its memory layout (`W.T` is not its
    # C-ordered copy).
    return (np.ndarray, dtype_key(a.dtype), a.shape, layout(a))


def mutable_dtype(dt: np.dtype) -> bool:
    """Whether part of `dt` can be assigned in place: the field names of a structured dtype, its
    own or one inside it (`a.dtype.names = ("b", "a")` renames the fields of every array, and
    every canonical form, holding that dtype object)."""
    return any(names is not None for names in all_names(dt))


def private_dtype(dt: np.dtype) -> np.dtype:
    """`dt` itself if nothing of it can change, else a copy of it that nothing else holds."""
    return _copy.deepcopy(dt) if mutable_dtype(dt) else dt


def array_key(a: np.ndarray) -> tuple:
    """What a walk appends for the canonical array `a` (it is also a `CanonicalArray`'s key)."""
    return ((*_array_parts(a), id(a)),)


def canonical_array(a: np.ndarray, canonical: bool) -> np.ndarray:
    """One read-only array per dtype, shape, layout and bytes (an object array is its own
    class), laid out as `a` is: a plain `np.ndarray`, or a [`CanonicalArray`][] for a plain
    module (`canonical`)."""
    a = np.ndarray.view(a, np.ndarray)
    mutable = mutable_dtype(a.dtype)
    if a.dtype.hasobject or mutable:
        copy = _object_copy(a) if a.dtype.hasobject else frozen_copy(a)
        if mutable:
            # A dtype of its own: the copy shares the user's dtype object, whose field names
            # the program may assign later (`a.dtype.names = ("b", "a")`), and with them this
            # value. (A view as another dtype object of the same size keeps the strides.)
            copy = copy.view(private_dtype(copy.dtype))
        # Not shared (an object array is its own class; whoever reads a structured one back may
        # rename its fields, which would rename them for every module holding it): a copy of
        # this holder's own, as an `equinox.Module` would hold, read-only through a view (NumPy
        # lets the owner of its memory be made writable again; a view of a read-only base not).
        copy.flags.writeable = False
        copy = copy.view(CanonicalArray) if canonical else copy.view()
        if canonical:
            copy._key = array_key(copy)  # pyright: ignore[reportAttributeAccessIssue]
        return copy
    # Over the immutable `bytes`, never over memory that NumPy may make writeable again, laid
    # out as `a` (`W.T` reads back Fortran-ordered, a strided view with its strides).
    copy = frozen_copy(a, CanonicalArray if canonical else np.ndarray)
    data = a.tobytes()
    key = (*_array_parts(copy), hash(data), canonical)
    with _lock:
        refs = _arrays.setdefault(key, [])
        for ref in refs:
            other = ref()
            if other is not None and other.tobytes() == data:
                return other
        refs[:] = [r for r in refs if r() is not None]
        refs.append(weakref.ref(copy, lambda r, key=key: _drop_array(key)))
    if canonical:
        copy._key = array_key(copy)  # pyright: ignore[reportAttributeAccessIssue]
    return copy


def _drop_array(key: tuple) -> None:
    with _lock:
        refs = _arrays.get(key)
        if refs is not None:
            refs[:] = [r for r in refs if r() is not None]
            if not refs:
                del _arrays[key]


def own_view(a: np.ndarray) -> np.ndarray:
    """A read-only view of the shared array `a` (made by `canonical_array`, not `canonical`) for
    one holder: its own object over the same `bytes`, so that assigning its `shape`, `dtype` or
    `strides` changes no other holder's array. An object array, which is not shared, is `a`."""
    memory = a.base
    if type(memory) is not bytes:
        return a
    f = a.flags
    if f.aligned and (f.c_contiguous or f.f_contiguous):
        # At the start of its memory (`_layout.frozen_copy`): no offset to find.
        return np.ndarray(a.shape, a.dtype, buffer=memory, strides=a.strides)
    return np.ndarray(a.shape, a.dtype, buffer=memory, offset=offset(a), strides=a.strides)


def canonical_view(a: np.ndarray) -> Any:
    """A `CanonicalArray` over the memory of the shared array `a` for one plain module (the
    same immutable `bytes`, or the same own copy: an object or structured array)."""
    memory = a.base
    if type(memory) is bytes:
        at = offset(a)
        return np.ndarray.__new__(
            CanonicalArray, a.shape, a.dtype, buffer=memory, offset=at, strides=a.strides
        )
    return a.view(CanonicalArray)


def intact(view: Any, a: np.ndarray) -> bool:
    """Whether `view`, handed out by `own_view(a)`, still is the array `a`: the same memory,
    dtype, shape and strides, read-only (no write can make it writeable: it is over `bytes`)."""
    if view is a:
        return True
    return (
        type(view) is np.ndarray
        and view.base is a.base
        and view.dtype is a.dtype
        and view.shape == a.shape
        and view.strides == a.strides
    )


def _object_copy(a: np.ndarray) -> np.ndarray:
    """A copy of the object array `a` (its items shared) laid out as `a` is."""
    return object_like(a, a)


def object_like(values: np.ndarray, like: np.ndarray) -> np.ndarray:
    """A new object array holding the items of `values` (of `like`'s shape), laid out as `like`
    is: C or Fortran order as its (`np.array(..., order="K")`), a strided view with its strides
    over an array that spans them where they are whole items apart (else contiguous in its
    order)."""
    copy = np.empty_like(like, order="K")
    copy[...] = values
    if layout(copy) == layout(like) or any(s % like.itemsize for s in like.strides):
        return copy
    low = sum((n - 1) * s for n, s in zip(like.shape, like.strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(like.shape, like.strides) if s > 0)
    spread = np.empty((high - low) // like.itemsize + 1, like.dtype)
    out = np.lib.stride_tricks.as_strided(
        spread[-low // like.itemsize :], like.shape, like.strides, writeable=True
    )
    out[...] = values
    return out
