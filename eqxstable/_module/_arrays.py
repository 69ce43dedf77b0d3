"""One read-only NumPy array per dtype, shape and bytes: the array a static value holds, in
either form (a plain `np.ndarray` for a `StableModule`, a `CanonicalArray` for a plain module)."""

import threading
import weakref

import numpy as np

from .._keys._dtypes import dtype_key
from ._canonical import CanonicalArray


_arrays: dict[tuple, list[weakref.ref]] = {}
# Reentrant: a weak reference callback (`_drop_array`) may run, through garbage collection, on
# a thread that already holds it.
_lock = threading.RLock()


def _array_parts(a: np.ndarray) -> tuple:
    # The dtype's whole description (`dtype_key`), not `dtype.str` (`int4` and `uint4`, and
    # structured dtypes with other fields, share a `str`) nor the dtype's `==` (a packed and an
    # aligned struct are equal, and differ in layout).
    return (np.ndarray, dtype_key(a.dtype), a.shape)


def array_key(a: np.ndarray) -> tuple:
    """What a walk appends for the canonical array `a` (it is also a `CanonicalArray`'s key)."""
    return ((*_array_parts(a), id(a)),)


def canonical_array(a: np.ndarray, canonical: bool) -> np.ndarray:
    """One read-only array per dtype, shape and bytes (an object array is its own class): a
    plain `np.ndarray`, or a [`CanonicalArray`][] for a plain module (`canonical`)."""
    copy = np.array(a, copy=True, subok=False)
    copy.flags.writeable = False
    if canonical:
        copy = copy.view(CanonicalArray)
    if copy.dtype.hasobject:
        if canonical:
            copy._key = array_key(copy)  # pyright: ignore[reportAttributeAccessIssue]
        return copy
    data = copy.tobytes()
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
