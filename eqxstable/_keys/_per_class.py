"""Caches of what is computed from a class, that never keep the class alive.

A class made at run time (a `collections.namedtuple` or a dataclass made per call, an
`eqx.Module` from a factory) must be freed once the program drops it, with everything its methods
close over. A plain `dict` keyed by the class, or `functools.cache`, holds it for good.
"""

import weakref
from collections.abc import Callable
from typing import Any, TypeVar


_V = TypeVar("_V")
_MISSING: Any = object()
# `weakref.ref(cls)` without a callback is the one plain reference CPython keeps per object: it
# allocates nothing once it exists, and hashes and compares as its class while the class lives.
ref = weakref.ref


class PerClass(dict[weakref.ref, _V]):
    """A `dict` from `ref(cls)` to what was computed from `cls`: look up with
    `table.get(ref(cls))` (a lookup at C speed), store with `table.put(cls, value)`, which drops
    the entry when the class dies. A dead reference keeps the hash it had, so it still finds its
    entry to drop."""

    __slots__ = ("_finalizers",)

    def __init__(self) -> None:
        super().__init__()
        self._finalizers: dict[weakref.ref, weakref.ref] = {}

    def put(self, cls: type, value: _V) -> None:
        r = ref(cls)
        self[r] = value
        finalizers = self._finalizers
        if r not in finalizers:
            finalizers[r] = ref(cls, lambda _, r=r, table=self: table._drop(r))

    def _drop(self, r: weakref.ref) -> None:
        self.pop(r, None)
        self._finalizers.pop(r, None)

    def clear(self) -> None:
        super().clear()
        self._finalizers.clear()


def per_class(fn: Callable[[type], _V]) -> Callable[[type], _V]:
    """`functools.cache` for a function of one class, holding the class weakly (`PerClass`)."""
    table: PerClass[_V] = PerClass()
    get = table.get

    def cached(cls: type) -> _V:
        value: Any = get(ref(cls), _MISSING)
        if value is _MISSING:
            value = fn(cls)
            table.put(cls, value)
        return value

    cached.__name__ = fn.__name__
    cached.__qualname__ = fn.__qualname__
    cached.__doc__ = fn.__doc__
    cached.__wrapped__ = fn  # pyright: ignore[reportFunctionMemberAccess]
    cached.cache_clear = table.clear  # pyright: ignore[reportFunctionMemberAccess]
    return cached
