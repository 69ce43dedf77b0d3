"""Caches of what is computed from a class, looked up by the class's identity, that never keep
the class alive.

A class made at run time (a `collections.namedtuple` or a dataclass made per call, an
`eqx.Module` from a factory) must be freed once the program drops it, with everything its methods
close over. A plain `dict` keyed by the class, or `functools.cache`, holds it for good.

Nor may a lookup ask the class anything. A `dict` keyed by the class (or by `weakref.ref(cls)`,
which hashes and compares as its referent while it lives) calls its metaclass's `__hash__` and
`__eq__`: a metaclass that calls two classes equal by name (a notebook's redefinition, a registry
of specs) would hand the second class the first one's facts (its slots, its handler). Every table
here is keyed by `id(cls)`, and an entry is dropped by a weak reference's callback when its class
dies, which CPython runs before the class's memory can be reused: a later class with the same
`id` never finds it.
"""

import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar


_V = TypeVar("_V")
_MISSING: Any = object()


class PerClass(dict[int, _V]):
    """A `dict` from `id(cls)` to what was computed from `cls`: look up with
    `table.get(id(cls))` (a lookup at C speed that runs no code of the class's), store with
    `table.put(cls, value)`, which drops the entry when the class dies."""

    __slots__ = ("_finalizers",)

    def __init__(self) -> None:
        super().__init__()
        self._finalizers: dict[int, weakref.ref] = {}

    def put(self, cls: type, value: _V) -> None:
        i = id(cls)
        self[i] = value
        finalizers = self._finalizers
        known = finalizers.get(i)
        # A finalizer of this very class (compared by `is`, never `==`); any other is stale.
        if known is None or known() is not cls:
            finalizers[i] = weakref.ref(cls, lambda r, i=i, table=self: table._drop(i, r))

    def _drop(self, i: int, r: weakref.ref) -> None:
        # Only this class's own entry: a put for a new class at the same `id` replaced `r`.
        if self._finalizers.get(i) is r:
            del self._finalizers[i]
            self.pop(i, None)

    def clear(self) -> None:
        super().clear()
        self._finalizers.clear()


def per_class(fn: Callable[[type], _V]) -> Callable[[type], _V]:
    """`functools.cache` for a function of one class, by its identity, holding it weakly
    (`PerClass`)."""
    table: PerClass[_V] = PerClass()
    get = table.get

    def cached(cls: type) -> _V:
        value: Any = get(id(cls), _MISSING)
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


# The classes the static tables below name (builtins and library classes, which live as long as
# the program does): held here, so that no `id` in a table can ever be another class's.
_HELD: list[type] = []


def type_ids(types: Iterable[type]) -> frozenset[int]:
    """The identities of `types`, for `id(type(x)) in ids`: a membership test by identity. `t in
    {int, str}` (or in a tuple) hashes and compares `t` with its metaclass's `__hash__`/`__eq__`,
    which a user's metaclass may define to call its class equal to `int`."""
    types = list(types)
    _HELD.extend(types)
    return frozenset(map(id, types))


class TypeTable(dict[int, _V]):
    """A table of long-lived classes (builtins, library classes) keyed by their identity, each
    held for good (see `type_ids`): `table[cls] = value` stores, `table.get(id(cls))` looks up
    at C speed without asking the class anything."""

    __slots__ = ()

    def __init__(self, items: dict[type, _V] | None = None) -> None:
        super().__init__()
        for t, v in (items or {}).items():
            self[t] = v  # pyright: ignore[reportArgumentType]

    def __setitem__(self, cls: type, value: _V) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        _HELD.append(cls)
        super().__setitem__(id(cls), value)
