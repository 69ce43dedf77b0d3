"""One read-only NumPy array per dtype, shape and bytes: the array a static value holds, in
either form (a plain `np.ndarray` for a `StableModule`, a `CanonicalArray` for a plain module)."""

import copy as _copy
import threading
import weakref

import numpy as np

from .._keys._dtypes import all_names, dtype_key
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
    """One read-only array per dtype, shape and bytes (an object array is its own class): a
    plain `np.ndarray`, or a [`CanonicalArray`][] for a plain module (`canonical`)."""
    copy = np.array(a, copy=True, subok=False)
    mutable = mutable_dtype(copy.dtype)
    if mutable:
        # A dtype of its own: the copy shares the user's dtype object, whose field names the
        # program may assign later (`a.dtype.names = ("b", "a")`), and with them this value.
        copy = copy.view(private_dtype(copy.dtype))
    copy.flags.writeable = False
    # A view of that read-only copy, which nothing else holds: NumPy lets the owner of its memory
    # be made writable again (`flags.writeable = True`), which would change the value of every
    # module sharing it; a view of a read-only base cannot be.
    copy = copy.view(CanonicalArray) if canonical else copy.view()
    if copy.dtype.hasobject or mutable:
        # Not shared with another value either: whoever reads this one back may rename its
        # fields, which would rename them for every module holding it (a structured static
        # array is rare; each module then has its own, as an `equinox.Module` would).
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
