"""The memory layout of a NumPy array, which code can read (`a.strides`, `a.flags`,
`a.ravel(order="K")`, `a.flatten("A")`, `np.frombuffer(a)`), as part of its key (`layout`), and
a read-only copy over immutable `bytes` that keeps it (`frozen_copy`).

A transpose `W.T` and its C-ordered copy hold equal values and equal C-order bytes, yet
`np.ravel(W.T, order="K")` and `np.ravel(C, order="K")` differ: two arrays are one only if
their layouts are, and the copy `intern` and a module hand out must keep the layout it was
keyed by."""

from typing import Any

import numpy as np


def layout(a: np.ndarray) -> Any:
    """The part of `a`'s layout that code can tell apart: `"C"` for a C-contiguous array (one
    that is both, a 1-D one, is `"C"`: its copy is both again), `"F"` for a Fortran-contiguous
    one, else its strides themselves (a strided view: `a[:, ::2]`, `a[::-1]`, a broadcast);
    with `"unaligned"` for an array NumPy does not see as aligned (`flags.aligned`).

    The strides of a contiguous array along an axis of length 1 (which NumPy ignores in its
    flags) are not told apart; neither are `flags.writeable` (what `intern` and a module hand
    out is read-only by contract) nor `flags.owndata` and `base` (always a copy's)."""
    f = a.flags
    order = "C" if f.c_contiguous else "F" if f.f_contiguous else a.strides
    return order if f.aligned else (order, "unaligned")


def _span(a: np.ndarray) -> tuple[int, int]:
    # The bytes a strided view spans (from its lowest item to its highest, gaps included),
    # and its first item's offset in them (past the items that negative strides put before it).
    low = high = 0
    for n, s in zip(a.shape, a.strides):
        if s < 0:
            low += (n - 1) * s
        else:
            high += (n - 1) * s
    return high - low + a.dtype.itemsize, -low


def frozen_copy(a: np.ndarray, cls: type = np.ndarray) -> np.ndarray:
    """A read-only copy of `a` (of class `cls`) over an immutable `bytes` object, with `a`'s
    layout (`layout(copy) == layout(a)`): the same dtype, shape and items, C- or
    Fortran-contiguous as `a` is, a strided view with `a`'s very strides (over a buffer that
    spans them, its gaps zero), unaligned where `a` is. NumPy refuses to make it writeable (its
    memory is `bytes`). `a` holds no Python objects."""
    f = a.flags
    # An unaligned array (from `np.frombuffer` at an odd offset, a field of a packed record)
    # is read back unaligned: its items one byte past an aligned address.
    shift = 0 if f.aligned or a.dtype.alignment <= 1 else 1
    if a.size == 0 or f.c_contiguous or f.f_contiguous:
        order = "C" if a.size == 0 or f.c_contiguous else "F"
        data = bytes(shift) + a.tobytes(order=order)
        return np.ndarray.__new__(cls, a.shape, a.dtype, buffer=data, offset=shift, order=order)
    span, first = _span(a)
    buffer = bytearray(shift + span)
    offset = shift + first
    spread = np.ndarray(a.shape, a.dtype, buffer=buffer, offset=offset, strides=a.strides)
    # A copy of the same dtype is bit for bit (a NaN's payload, `-0.0`); items that share
    # memory in `a` (a stride of 0, overlapping windows) share it in `spread` as well.
    np.copyto(spread, a, casting="no")
    return np.ndarray.__new__(
        cls, a.shape, a.dtype, buffer=bytes(buffer), offset=offset, strides=a.strides
    )


def offset(a: np.ndarray) -> int:
    """Where the first item of `a`, an array over a `bytes` object (`frozen_copy`), lies in it."""
    memory = np.frombuffer(a.base, np.uint8)  # pyright: ignore[reportCallIssue, reportArgumentType]
    return a.__array_interface__["data"][0] - memory.__array_interface__["data"][0]
