"""Caches of what is computed from a class, that never keep the class alive.

A class made at run time (a `collections.namedtuple` or a dataclass made per call, an
`eqx.Module` from a factory) must be freed once the program drops it, with everything its methods
close over. A plain `dict` keyed by the class, or `functools.cache`, holds it for good.
"""

import functools as ft
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar


_V = TypeVar("_V")
_HEAPTYPE = 1 << 9
_ref = weakref.ref
# `type.__flags__` itself: a metaclass can shadow `cls.__flags__` with an attribute of its own.
_flags: Callable[[type], int] = type.__dict__["__flags__"].__get__
_MISSING: Any = object()


def made_by_python(cls: type) -> bool:
    """Whether `cls` is a heap type (made by a `class` statement or `type(...)`), which may die;
    a static type (a builtin, a C extension's type) never does."""
    return bool(_flags(cls) & _HEAPTYPE)


class PerClass(Generic[_V]):
    """A mapping from a class to what was computed from it. A class Python code made (a heap
    type) is held by a weak reference, and its entry is dropped when it dies. A static type
    (`int`, `tuple`, a C extension's type) lives for good anyway: it is a plain `dict` key, the
    fastest lookup, which the builtin kinds met most often take."""

    __slots__ = ("_static", "_heap", "_finalizers")

    def __init__(self) -> None:
        self._static: dict[type, _V] = {}
        # Keyed by the class's plain weak reference, which CPython shares between all its
        # callers (`weakref.ref(cls)` allocates nothing once one exists): a lookup is a dict
        # lookup by that reference, whose hash and `==` are its class's while it lives.
        self._heap: dict[weakref.ref, _V] = {}
        self._finalizers: dict[weakref.ref, weakref.ref] = {}

    def get(self, cls: type, default: Any = None) -> Any:
        if _flags(cls) & _HEAPTYPE:
            return self._heap.get(_ref(cls), default)
        return self._static.get(cls, default)

    def set(self, cls: type, value: _V) -> None:
        if not _flags(cls) & _HEAPTYPE:
            self._static[cls] = value
            return
        r = _ref(cls)
        heap, finalizers = self._heap, self._finalizers
        heap[r] = value
        if r not in finalizers:
            # The dead reference keeps the hash it had, so it still finds its entry.
            def drop(_: Any, r: weakref.ref = r) -> None:
                heap.pop(r, None)
                finalizers.pop(r, None)

            finalizers[r] = _ref(cls, drop)

    def clear(self) -> None:
        self._static.clear()
        self._heap.clear()
        self._finalizers.clear()

    def __len__(self) -> int:
        return len(self._static) + len(self._heap)


def per_class(fn: Callable[[type], _V]) -> Callable[[type], _V]:
    """`functools.cache` for a function of one class, holding the class weakly (`PerClass`)."""
    table: PerClass[_V] = PerClass()
    get, put = table.get, table.set

    @ft.wraps(fn)
    def cached(cls: type) -> _V:
        value = get(cls, _MISSING)
        if value is _MISSING:
            value = fn(cls)
            put(cls, value)
        return value

    cached.cache_clear = table.clear  # pyright: ignore[reportAttributeAccessIssue]
    return cached
