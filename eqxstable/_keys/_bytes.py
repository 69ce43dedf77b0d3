"""Whether a watched buffer still holds the bytes it held when keyed (`same_bytes`): a NumPy
array's shape, dtype, strides and bytes (`ArrayState`), compared in place where it lies
(`memcmp` for a contiguous one, blocks of bit patterns for a strided view), never by value
(`0.0 == -0.0`, a NaN is unequal to itself) and never copied out whole on a call."""

import sys
from typing import Any

import numpy as np

from ._dtypes import dtype_key


class ArrayState:
    """What a NumPy array reached through a function or object held when it was keyed: its shape
    and dtype (either can be assigned in place: `a.shape = (2, 2)` keeps the bytes), its strides
    (`a.strides = (8, 16)` transposes a symmetric matrix in place, its C-order bytes unchanged,
    and what `a.ravel(order="K")` and `a.flags` read with them) and its bytes.

    A `shared` one (a large array's copy, which every reader of the unchanged array shares:
    `_arrays._reached`) lives only as long as a strong watch holds it (a jitted wrapper's, a
    cache entry's): the memo's weak watch and the table of shared copies hold it weakly, so the
    copy goes with the last wrapper or entry that checks the array on its calls."""

    __slots__ = ("shape", "strides", "dtype", "data", "shared", "__weakref__")

    def __init__(self, array: np.ndarray, data: bytes, shared: bool = False):
        self.shape = array.shape
        self.strides = array.strides
        self.dtype = dtype_key(array.dtype)
        self.data = data
        self.shared = shared


def same_bytes(holder: Any, data: Any) -> bool:
    """Whether a watched buffer still holds `data`: a NumPy array (`ArrayState`) compared
    byte for byte with its shape, strides and dtype, in place where it is contiguous
    (`memcmp`, which stops at the first difference, allocates nothing and runs without the
    GIL); anything else by its `tobytes()`."""
    if type(data) is not ArrayState:
        return holder.tobytes() == data
    # A subclass through a plain view (a masked array compares and reshapes by its mask).
    a = holder if type(holder) is np.ndarray else np.ndarray.view(holder, np.ndarray)
    if a.shape != data.shape or a.strides != data.strides or dtype_key(a.dtype) != data.dtype:
        return False
    n = len(data.data)
    if a.nbytes != n:
        return False
    if n <= _COPIED:
        # Small: a copy costs less than a call through `ctypes`.
        return a.tobytes() == data.data
    if not a.flags.c_contiguous:
        # Scattered in memory (a column slice of a matrix): compared where it is, in slices,
        # against the bytes it had, never copied out whole (64 MB: a `tobytes()` a call).
        return _same_strided(a, data.data)
    if _memcmp is not None:
        return _memcmp(a.ctypes.data, data.data, n) == 0
    return _same_slices(a, data.data)


# Up to this many bytes, an array's bytes are copied out and compared as `bytes`.
_COPIED = 1 << 16


def _same_slices(a: np.ndarray, data: bytes) -> bool:
    # Without `memcmp`: NumPy on a `uint8` (or `uint64`) view, in slices: `array_equal` makes a
    # boolean array as long as its inputs, which for a 256 MB array is 32 MB made on every call
    # (and kept by the allocator after the last).
    flat = a.reshape(-1).view(np.uint8)
    ref = np.frombuffer(data, np.uint8)
    if flat.size % 8 == 0:
        flat, ref = flat.view(np.uint64), ref.view(np.uint64)
    n = flat.size
    for i in range(0, n, _SLICE):
        if not np.array_equal(flat[i : i + _SLICE], ref[i : i + _SLICE]):
            return False
    return True


_SLICE = 1 << 19
_UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bits(a: np.ndarray) -> np.ndarray:
    # The array's items as unsigned integers of their size, or as rows of bytes for another
    # size (`complex128`, `S7`, a record): compared bit for bit, never by value (`0.0 == -0.0`,
    # a NaN is unequal to itself). A view of the same memory, strided as `a` is.
    size = a.dtype.itemsize
    uint = _UINTS.get(size)
    return a.view(uint if uint is not None else np.dtype((np.uint8, size)))


def _same_strided(a: np.ndarray, data: bytes) -> bool:
    """Whether a non-contiguous array holds `data` (its bytes in C order, as `tobytes` gives
    them): its items compared bit for bit with the saved bytes seen as an array of its shape,
    a block of leading-axis rows at a time (about `_SLICE` items each, so the boolean array
    `array_equal` makes stays small), without copying the array out."""
    if a.dtype.itemsize == 0 or a.size == 0:
        return a.tobytes() == data
    bits = _bits(a)
    ref = _bits(np.frombuffer(data, a.dtype).reshape(a.shape))
    return _same_blocks(bits, ref)


def _same_blocks(bits: np.ndarray, ref: np.ndarray) -> bool:
    if bits.ndim == 0:
        return bool(np.array_equal(bits, ref))
    per_row = max(1, bits[:1].size)
    if per_row > 4 * _SLICE and bits.ndim > 1:
        # Few long rows (a `(2, 10**8)` view): each row in blocks of its own.
        return all(_same_blocks(bits[i], ref[i]) for i in range(bits.shape[0]))
    step = max(1, _SLICE // per_row)
    for i in range(0, bits.shape[0], step):
        if not np.array_equal(bits[i : i + step], ref[i : i + step]):
            return False
    return True


def _find_memcmp() -> Any:
    """The C library's `memcmp` through `ctypes`, or `None` where there is none to be had (the
    comparison then runs in NumPy, in slices)."""
    try:
        import ctypes

        lib = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
        fn = lib.memcmp
        fn.restype = ctypes.c_int
        fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        # Checked once: a `memcmp` that does not tell these apart is not used.
        if fn(b"ab", b"ab", 2) != 0 or fn(b"ab", b"ac", 2) == 0:
            return None
        return fn
    except Exception:
        return None


_memcmp = _find_memcmp()
