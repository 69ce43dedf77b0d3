"""The canonical form of a `StableModule`'s static field, and the value it reads back as.

A static field is part of the PyTree structure: JAX and Equinox hash it and compare it with `==`.
Python's `==` says `2 == 2.0` and `[1] == [1.0]`, so two models would share a compiled program that
computes different dtypes; and lists, dicts, sets and NumPy arrays cannot be hashed at all. So a
static field holds a [`Static`][]: one object per equivalence class (two values built from
equivalent parts give the very same `Static`, others never do), compared by identity, which is
type-exact and C-fast. What the module's own code reads is [`Static.value`][], the value as it
was assigned: a read-only `dict`/`list`/`set` subclass, a read-only NumPy array, the NumPy
scalar, the number (the `StableModule` field descriptor hands it out).

Two `Static`s are the same object exactly when their values have the same structure (container
types, lengths, dict keys, set order) and the same leaves after interning ([`eqxstable.intern`][]
makes equivalent leaves one object), with NumPy arrays and scalars compared by dtype (its full
description), shape and bytes.
"""

import operator
import struct
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import jax
import numpy as np


MSG_READ_ONLY = (
    "`{cls}.{method}`: a static field of an `eqxstable.StableModule` is read-only, because it "
    "is part of the PyTree structure (a compiled program was traced for this value). Build a "
    "new model with the new value, or copy it first (`dict(...)`, `list(...)`, `set(...)`)."
)


def _read_only(name: str) -> Callable[..., NoReturn]:
    def method(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(MSG_READ_ONLY.format(cls=type(self).__mro__[1].__name__, method=name))

    method.__name__ = name
    return method


def _forbid(cls: type, names: Iterable[str]) -> type:
    for name in names:
        setattr(cls, name, _read_only(name))
    return cls


class ReadOnlyDict(dict):
    """A `dict` that cannot be changed: a static field's dict as the module's code reads it.
    `isinstance(x, dict)`, `==` with a dict, `json.dumps` and `dict(x)` behave as on the dict."""

    __slots__ = ()

    def __reduce__(self):
        return (ReadOnlyDict, (dict(self),))

    def __repr__(self) -> str:
        return dict.__repr__(self)


class ReadOnlyList(list):
    """A `list` that cannot be changed: a static field's list as the module's code reads it."""

    __slots__ = ()

    def __reduce__(self):
        return (ReadOnlyList, (list(self),))

    def __repr__(self) -> str:
        return list.__repr__(self)


class ReadOnlySet(set):
    """A `set` that cannot be changed: a static field's set as the module's code reads it."""

    __slots__ = ()

    def __reduce__(self):
        return (ReadOnlySet, (list(self),))

    def __repr__(self) -> str:
        return set.__repr__(self)


_forbid(ReadOnlyDict, ("__setitem__", "__delitem__", "__ior__", "clear", "pop", "popitem"))
_forbid(ReadOnlyDict, ("setdefault", "update"))
_forbid(ReadOnlyList, ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "clear"))
_forbid(ReadOnlyList, ("extend", "insert", "pop", "remove", "reverse", "sort"))
_forbid(ReadOnlySet, ("__ior__", "__iand__", "__isub__", "__ixor__", "add", "clear", "discard"))
_forbid(ReadOnlySet, ("difference_update", "intersection_update", "pop", "remove"))
_forbid(ReadOnlySet, ("symmetric_difference_update", "update"))


# What each read-only view stands for, for messages and for the plain-module canonical forms.
VIEW_BASES: dict[type, type] = {ReadOnlyDict: dict, ReadOnlyList: list, ReadOnlySet: set}


class _Anchor:
    """What the canonical table holds weakly: a tuple cannot be weakly referenced, so each
    `Static` holds one of these, which holds the `Static` (a cycle that the garbage collector
    clears once no module holds the `Static`)."""

    __slots__ = ("static", "__weakref__")


class Static(tuple):
    """The canonical form of one static field's value in an `eqxstable.StableModule`.

    - `value`: what the module's code reads: the value as assigned, read-only where the original
        was mutable.
    - `has_array`: whether an array is in it (Equinox warns about arrays in static fields, so its
        own check is shown the `Static`, never the arrays).
    - `parts`: the structure and the leaves' identities, the key of the canonical table.

    Equal only to itself, with an identity hash, as one object stands for the whole class.
    Copies and pickles come back as the canonical object. It is a tuple so that
    `eqxstable.stable_key` keys it by its contents (a closure in it is watched for a rebound
    cell, as anywhere else), whatever its own `==` says.
    """

    def __new__(cls, value: Any, has_array: bool, parts: tuple) -> "Static":
        anchor = _Anchor()
        self = tuple.__new__(cls, (value, has_array, parts, anchor))
        anchor.static = self
        return self

    @property
    def value(self) -> Any:
        return self[0]

    @property
    def has_array(self) -> bool:
        return self[1]

    @property
    def parts(self) -> tuple:
        return self[2]

    __eq__ = object.__eq__  # pyright: ignore[reportAssignmentType]
    __ne__ = object.__ne__  # pyright: ignore[reportAssignmentType]
    __hash__ = object.__hash__  # pyright: ignore[reportAssignmentType]

    def __reduce__(self):
        return (_restore, (self[0],))

    def __repr__(self) -> str:
        return f"Static({self[0]!r})"


# `parts` -> the anchor of the canonical `Static` with those parts.
_table: "weakref.WeakValueDictionary[tuple, _Anchor]" = weakref.WeakValueDictionary()
_arrays: dict[tuple, list[weakref.ref]] = {}
# Reentrant: a weak reference callback (`_drop_array`) may run, through garbage collection, on
# a thread that already holds it.
_lock = threading.RLock()

# Values whose `==` is already exact (equal only to equal values of the same type), stored as
# they are: wrapping them would only cost a descriptor call per read.
_PLAIN = frozenset({str, bool, type(None)})

_Leaf = Callable[[Any, Any], Any]
# Immutable atoms whose value (of that exact type) determines what they compute.
_ATOMS = frozenset({str, bytes, int, bool, float, type(None)})
_FLOAT = struct.Struct("<d")
# Deeper than this, the rest of a static value is one leaf (never a `RecursionError`).
_MAX_DEPTH = 64


def _array_parts(a: np.ndarray) -> tuple:
    # `dtype` itself, not `dtype.str`: `int4` and `uint4` (and structured dtypes with other
    # fields) share a `str` but compute differently.
    return (np.ndarray, a.dtype, a.shape)


def _canonical_array(a: np.ndarray) -> np.ndarray:
    """One read-only array per dtype, shape and bytes (an object array is its own class)."""
    copy = np.array(a, copy=True)
    copy.flags.writeable = False
    if copy.dtype.hasobject:
        return copy
    data = copy.tobytes()
    key = (*_array_parts(copy), hash(data))
    with _lock:
        refs = _arrays.setdefault(key, [])
        for ref in refs:
            other = ref()
            if other is not None and other.tobytes() == data:
                return other
        refs[:] = [r for r in refs if r() is not None]
        refs.append(weakref.ref(copy, lambda r, key=key: _drop_array(key)))
    return copy


def _drop_array(key: tuple) -> None:
    with _lock:
        refs = _arrays.get(key)
        if refs is not None:
            refs[:] = [r for r in refs if r() is not None]
            if not refs:
                del _arrays[key]


class _Freezer:
    """One walk over a static value: builds the value to read back and the table key."""

    __slots__ = ("leaf", "parts", "has_array", "depth")

    def __init__(self, leaf: _Leaf, depth: int = 0):
        self.leaf = leaf
        self.parts: list = []
        self.has_array = False
        self.depth = depth

    def __call__(self, obj: Any, path: Any) -> Any:
        if self.depth >= _MAX_DEPTH:
            # Nested too deeply to walk (a 500-deep tuple): one leaf, which `leaf` keys.
            return self._leaf(obj, path)
        self.depth += 1
        try:
            return self._freeze(obj, path)
        finally:
            self.depth -= 1

    def _freeze(self, obj: Any, path: Any) -> Any:
        t = type(obj)
        parts = self.parts
        if t in _ATOMS:
            # Compared by value, type-exactly (a float by its bits: `-0.0` is not `0.0`, a NaN
            # equals a NaN with the same bits): no need to intern them.
            parts.append((t, _FLOAT.pack(obj) if t is float else obj))
            return obj
        if t is list or t is ReadOnlyList or t is tuple:
            parts.append((list if t is ReadOnlyList else t, len(obj)))
            items = [self(x, (path, i)) for i, x in enumerate(obj)]
            if t is tuple:
                return obj if all(map(operator.is_, items, obj)) else tuple(items)
            return ReadOnlyList(items)
        if t is dict or t is ReadOnlyDict:
            parts.append((dict, len(obj)))
            return ReadOnlyDict(
                [(self(k, (path, "{key}")), self(v, (path, (k,)))) for k, v in obj.items()]
            )
        if t is set or t is ReadOnlySet or t is frozenset:
            parts.append((set if t is ReadOnlySet else t, len(obj)))
            # Frozen one by one first, then laid out in sorted order, the parts in that order.
            frozen = [(_Freezer(self.leaf, self.depth), x) for x in obj]
            items = [(f(x, (path, "{...}")), f) for f, x in frozen]
            items = [(x, f) for x, f in _sorted_pairs(items)]
            for _, f in items:
                parts.extend(f.parts)
                self.has_array = self.has_array or f.has_array
            values = [x for x, _ in items]
            return frozenset(values) if t is frozenset else ReadOnlySet(values)
        if t is np.ndarray:
            self.has_array = True
            canonical = _canonical_array(obj)
            parts.append((*_array_parts(canonical), id(canonical)))
            return canonical
        if isinstance(obj, np.generic):
            # Immutable: read back as it is, keyed by its exact type and bytes.
            self.has_array = True
            parts.append((t, obj.dtype, obj.tobytes()) if not obj.dtype.hasobject else id(obj))
            return obj
        if issubclass(t, tuple) and hasattr(obj, "_make") and not hasattr(obj, "__dict__"):
            # A NamedTuple (a subclass that can hold instance attributes is a leaf: `leaf` keys
            # those too, where `_make` would drop them).
            parts.append((t, len(obj)))
            items = [self(x, (path, i)) for i, x in enumerate(obj)]
            return obj if all(map(operator.is_, items, obj)) else obj._make(items)
        return self._leaf(obj, path)

    def _leaf(self, obj: Any, path: Any) -> Any:
        x = self.leaf(obj, path)
        if isinstance(x, jax.Array):
            self.has_array = True  # Kept, after a warning, by the module layer.
        # Equivalent leaves are one object after interning, so the identity is the key; the
        # `Static` holds the leaf, so the `id` is not reused while the key is in the table.
        self.parts.append((type(x), id(x)))
        return x


def _sorted_pairs(items: list) -> list:
    try:
        return sorted(items, key=lambda pair: pair[0])
    except TypeError:
        return items


def _keep(obj: Any, path: Any) -> Any:
    return obj


def freeze_static(obj: Any, leaf: _Leaf = _keep, path: Any = None) -> Any:
    """The canonical form of a static field's value: the value itself for a `str`, `bool` or
    `None` (after `leaf`), otherwise the one [`Static`][] of its equivalence class.

    **Arguments:**

    - `obj`: the value assigned to the static field (or a `Static`, returned as it is).
    - `leaf`: called as `leaf(x, path)` on every value that is not a list, tuple, NamedTuple,
        dict, set, frozenset or NumPy array or scalar; returns its canonical instance (the module
        layer interns it, and rejects JAX arrays).
    - `path`: where `obj` is, for `leaf`'s messages; an element's path is `(path, index)`,
        `(path, (key,))`, `(path, "{key}")` or `(path, "{...}")`.

    **Returns:**

    The canonical form.
    """
    t = type(obj)
    if t is Static:
        return obj
    if t in _PLAIN:
        return leaf(obj, path)
    freezer = _Freezer(leaf)
    value = freezer(obj, path)
    parts = tuple(freezer.parts)
    with _lock:
        anchor = _table.get(parts)
        if anchor is None:
            found = Static(value, freezer.has_array, parts)
            _table[parts] = found[3]
        else:
            found = anchor.static
    return found


def _restore(value: Any) -> Static:
    # Unpickling and copying: the leaves in a canonical value are canonical already, except
    # copies of them (a deep copy), which `intern` maps back.
    from ._registry import intern

    return freeze_static(value, lambda x, _: intern(x))


def thaw(obj: Any) -> Any:
    """The value a static field reads back as: `Static.value`, else `obj` itself."""
    return obj.value if type(obj) is Static else obj
