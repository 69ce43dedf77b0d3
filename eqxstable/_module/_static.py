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
description), shape and bytes. A leaf kept by reference that can change in place (an
`OrderedDict`, a `deque`, a user object: its key names it by identity) is looked up by what it
holds too: built over it again once it has changed, a module gets a new `Static`, so plain
`eqx.filter_jit` traces it again rather than reuse the program of its old contents.
"""

import operator
import struct
import threading
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .._keys import too_many_objects
from ._canonical import (
    canonical_scalar_class,
    CanonicalArray,
    CanonicalDict,
    CanonicalFrozenSet,
    CanonicalList,
    CanonicalSet,
    key_of,
)
from ._delegate import Delegate, DELEGATED, delegated, leaf_key, own_eq_class
from ._plain import MAX_DEPTH, reader
from ._readonly import OrderedFrozenSet, ReadOnlyDict, ReadOnlyList, ReadOnlySet
from ._views import VIEW_BASES


class _Anchor:
    """What the canonical table holds weakly: a tuple cannot be weakly referenced, so each
    `Static` holds one of these, which holds the `Static` (a cycle that the garbage collector
    clears once no module holds the `Static`)."""

    __slots__ = ("static", "read", "__weakref__")


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

    # Read by the keys layer (`_keys/_rules.py`), which may not import this layer above it.
    eqxstable_static_form = True

    def __new__(cls, value: Any, has_array: bool, parts: tuple) -> "Static":
        anchor = _Anchor()
        self = tuple.__new__(cls, (value, has_array, parts, anchor))
        anchor.static = self
        # How a read makes a plain copy of the value's lists and dicts, if any (`_plain.py`).
        anchor.read = reader(value)
        return self

    def __eq__(self, other: object) -> bool:
        # One object per equivalence class, so identity, except for a value holding a leaf that
        # may not be substituted (`Delegate`): one `Static` per module then, equal to another
        # exactly when their parts are (the leaves by their own `==` or their key, now).
        if self is other:
            return True
        if type(other) is not Static or not (delegated(self[2]) and delegated(other[2])):
            return False
        return self[2] == other[2]

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        parts = self[2]
        return hash(parts) if delegated(parts) else object.__hash__(self)

    @property
    def value(self) -> Any:
        return self[0]

    def read(self) -> Any:
        """What the module's code reads: the value, its lists and dicts as plain copies."""
        read = self[3].read
        return self[0] if read is None else read()

    @property
    def has_array(self) -> bool:
        return self[1]

    @property
    def parts(self) -> tuple:
        return self[2]

    def __reduce__(self):
        return (_restore, (self[0],))

    def __repr__(self) -> str:
        return f"Static({self[0]!r})"


# `_table_key(parts, changeable)` -> the anchor of the canonical `Static` with those parts.
_table: "weakref.WeakValueDictionary[tuple, _Anchor]" = weakref.WeakValueDictionary()
# `_table_key(...)` -> the canonical form that `freeze` stores in a plain module's static field.
_forms: "weakref.WeakValueDictionary[tuple, Any]" = weakref.WeakValueDictionary()
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
_MAX_DEPTH = MAX_DEPTH
# The kinds a walk takes apart; a read-back or canonical form is walked as what it stands for.
_KINDS: dict[type, type] = {list: list, tuple: tuple, dict: dict, set: set, frozenset: frozenset}
_KINDS.update(VIEW_BASES)
_KINDS[np.ndarray] = _KINDS[CanonicalArray] = np.ndarray
# Tags the table key of a value holding changeable leaves (see `_Freezer.changeable`).
_CHANGEABLE = object()


def _table_key(parts: tuple, changeable: tuple) -> tuple:
    """The key of the canonical tables: `parts`, and the current keys of the changeable leaves
    kept by reference, if any (a plain `parts` tuple never starts with `_CHANGEABLE`)."""
    return (_CHANGEABLE, parts, changeable) if changeable else parts


def _reusable(key: Any) -> bool:
    """Whether a registered canonical form with table key `key` may be taken as it is: not one
    holding changeable leaves, whose keys must be computed afresh (they may have changed)."""
    return key is not None and key[:1] != (_CHANGEABLE,)


def _array_parts(a: np.ndarray) -> tuple:
    # `dtype` itself, not `dtype.str`: `int4` and `uint4` (and structured dtypes with other
    # fields) share a `str` but compute differently.
    return (np.ndarray, a.dtype, a.shape)


def _array_key(a: np.ndarray) -> tuple:
    """What a walk appends for the canonical array `a` (it is also a `CanonicalArray`'s key)."""
    return ((*_array_parts(a), id(a)),)


def _canonical_array(a: np.ndarray, canonical: bool) -> np.ndarray:
    """One read-only array per dtype, shape and bytes (an object array is its own class): a
    plain `np.ndarray`, or a [`CanonicalArray`][] for a plain module (`canonical`)."""
    copy = np.array(a, copy=True, subok=False)
    copy.flags.writeable = False
    if canonical:
        copy = copy.view(CanonicalArray)
    if copy.dtype.hasobject:
        if canonical:
            copy._key = _array_key(copy)  # pyright: ignore[reportAttributeAccessIssue]
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
        copy._key = _array_key(copy)  # pyright: ignore[reportAttributeAccessIssue]
    return copy


def _drop_array(key: tuple) -> None:
    with _lock:
        refs = _arrays.get(key)
        if refs is not None:
            refs[:] = [r for r in refs if r() is not None]
            if not refs:
                del _arrays[key]


class _Freezer:
    """One walk over a static value: builds the value to read back and the table key.

    With `canonical`, for a plain module (`freeze`): a list, dict, set, frozenset, NumPy array
    or scalar becomes the one canonical form of its class, so that it can be hashed and compares
    type-exactly, where JAX compares it: at the top, or inside tuples and NamedTuples. Inside a
    canonical form (compared as a whole) and for a `StableModule` (`freeze_static`, keyed as a
    whole by the `Static`), the read-only forms that keep Python's `==`.

    A container met twice in one walk is frozen once, and the key says so: `[x, x]` reads back
    as one list twice (what `is` and a YAML dump's anchors show), `[x, copy(x)]` as two.
    """

    __slots__ = (
        "leaf",
        "parts",
        "changeable",
        "has_array",
        "depth",
        "canonical",
        "seen",
        "delegate",
        "delegates",
    )

    def __init__(self, leaf: _Leaf, canonical: bool):
        self.leaf = leaf
        # Whether a leaf that `intern` may not substitute is compared through a `Delegate`
        # (the `StableModule` form, one `Static` per module then), and whether one was.
        self.delegate = not canonical
        self.delegates = False
        self.parts: list = []
        # The keys of the leaves kept by reference that can change in place (an `OrderedDict`,
        # a `deque`, a user object): a leaf's identity does not say what it holds, so the same
        # object changed must find another canonical form (a new `Static`, and so a new program
        # under plain `eqx.filter_jit`), never the one made for its old contents.
        self.changeable: list = []
        self.has_array = False
        self.depth = 0
        self.canonical = canonical
        # `id` -> (the object, kept alive; what it froze to; where its parts start).
        self.seen: dict[int, tuple[Any, Any, int]] = {}

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
        kind = _KINDS.get(t)
        if kind is None:
            if isinstance(obj, np.generic):
                return self._scalar(obj)
            if issubclass(t, tuple) and hasattr(obj, "_make") and not hasattr(obj, "__dict__"):
                # A NamedTuple (a subclass that can hold instance attributes is a leaf: `leaf`
                # keys those too, where `_make` would drop them).
                parts.append((t, len(obj)))
                items = [self(x, (path, i)) for i, x in enumerate(obj)]
                return obj if all(map(operator.is_, items, obj)) else obj._make(items)
            return self._leaf(obj, path)
        if kind is tuple:
            parts.append((tuple, len(obj)))
            items = [self(x, (path, i)) for i, x in enumerate(obj)]
            return obj if all(map(operator.is_, items, obj)) else tuple(items)
        if kind is np.ndarray:
            # Equal arrays are one canonical array anyway: that one is shared, not the original.
            return self._container(obj, kind, path)
        seen = self.seen.get(id(obj))
        if seen is not None:
            # Relative, so that a form's key means the same inside another's.
            parts.append(("same as", len(parts) - seen[2]))
            return seen[1]
        start = len(parts)
        value = self._container(obj, kind, path)
        self.seen[id(obj)] = (obj, value, start)
        return value

    def _container(self, obj: Any, kind: type, path: Any) -> Any:
        parts = self.parts
        canonical = self.canonical
        if canonical:
            key = key_of(obj)
            if _reusable(key) and (_forms.get(key) is obj or kind is np.ndarray):
                # Already the canonical form (alive, so still the one in its table); its key is
                # what a walk of it appends.
                parts.extend(key)
                return obj
        if kind is np.ndarray:
            self.has_array = True
            array = _canonical_array(obj, canonical)
            parts.extend(_array_key(array))
            return array
        start = (len(parts), len(self.changeable))
        # Inside a canonical form, which is compared as a whole: the read-only forms.
        self.canonical = False
        try:
            if kind is list:
                parts.append((list, len(obj)))
                items = [self(x, (path, i)) for i, x in enumerate(obj)]
                value = _new(CanonicalList if canonical else ReadOnlyList, items)
            elif kind is dict:
                parts.append((dict, len(obj)))
                pairs = [(self(k, (path, "{key}")), self(v, (path, (k,)))) for k, v in obj.items()]
                value = _new(CanonicalDict if canonical else ReadOnlyDict, pairs)
            else:
                # A set or frozenset in its own iteration order, which depends on how it was
                # built: code that loops over it sees that order, so it is part of the value.
                parts.append((kind, len(obj)))
                items = [self(x, (path, "{...}")) for x in obj]
                value = self._set(obj, kind, items, canonical)
        finally:
            self.canonical = canonical
        return self._register(value, start) if canonical else value

    def _set(self, obj: Any, kind: type, items: list, canonical: bool) -> Any:
        if canonical:
            cls = CanonicalSet if kind is set else CanonicalFrozenSet
            return cls._make(items)
        same = all(map(operator.is_, items, obj))
        if kind is set:
            # From the set itself where nothing changed: laid out as `set(obj)` would be.
            return ReadOnlySet._make(obj if same and type(obj) is set else items)
        # A plain frozenset where one laid out from its items (as `pickle` and `copy` rebuild
        # it) iterates as it did: the original itself if nothing changed, it is immutable.
        plain = frozenset(items)
        if all(map(operator.is_, plain, items)):
            return obj if same and type(obj) is frozenset else plain
        return OrderedFrozenSet._make(items)

    def _scalar(self, obj: Any) -> Any:
        # Immutable: read back as it is (in a plain module, as an instance of a subclass of its
        # type that compares type-exactly), keyed by its exact type and bytes.
        self.has_array = True
        if isinstance(obj, np.void) and obj.flags.writeable:
            # Not immutable: a structured scalar is a view into the array it came from, which
            # the user can change (`v["a"] = 0.0`), under a key made of its old bytes. As a NumPy
            # array, it is read back as a read-only copy.
            # (`np.array(v, copy=True)` of such a scalar still shares its array's memory.)
            copy = np.array(obj).copy()
            copy.flags.writeable = False
            obj = copy[()]
        t = getattr(type(obj), "_base", type(obj))
        if obj.dtype.hasobject:
            self.parts.append((t, id(obj)))
            return obj
        part = (t, obj.dtype, obj.tobytes())
        if not self.canonical or not isinstance(obj, (np.number, np.bool_)):
            # A NumPy string, date or record in a plain module is stored as it is (hashable).
            self.parts.append(part)
            return obj if type(obj) is t else np.asarray(obj)[()]
        cls = canonical_scalar_class(t)
        made = cls(np.asarray(obj)[()])
        start = (len(self.parts), len(self.changeable))
        self.parts.append(part)
        if type(made) is not cls:
            # NumPy hands out its own two `bool` scalars, whatever the class asked for.
            return obj
        return self._register(made, start)

    def _register(self, value: Any, start: tuple[int, int]) -> Any:
        key = _table_key(tuple(self.parts[start[0] :]), tuple(self.changeable[start[1] :]))
        with _lock:
            found = _forms.get(key)
            if found is None:
                value._key = key
                _forms[key] = found = value
        return found

    def _leaf(self, obj: Any, path: Any) -> Any:
        x = self.leaf(obj, path)
        if isinstance(x, jax.Array):
            self.has_array = True  # Kept, after a warning, by the module layer.
        # Equivalent leaves are one object after interning, so the identity is the key; the
        # canonical form holds the leaf, so the `id` is not reused while the key is in a table.
        # A leaf that can change in place is also looked up by its key now (`changeable`).
        key = leaf_key(x)
        if self.delegate and not key.substitutable:
            # Kept as it is (its owner's object), compared by its own `==` or its key.
            own = own_eq_class(type(x))
            try:
                hash(Delegate(x, own))
            except Exception:
                pass  # Unhashable after all: by identity, as before.
            else:
                self.parts.append(Delegate(x, own))
                self.delegates = True
                return x
        self.parts.append((type(x), id(x)))
        if key.identity and not too_many_objects(key):
            # (An object reaching too many objects to key gets a key equal to nothing: it is
            # left to its identity, as Equinox leaves a static object, rather than given a new
            # canonical form, and so a new program, at every build.)
            self.changeable.append(key)
        return x


def _new(cls: Any, items: list) -> Any:
    value = cls.__new__(cls)
    (list.extend if issubclass(cls, list) else dict.update)(value, items)
    return value


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
    freezer = _Freezer(leaf, canonical=False)
    value = freezer(obj, path)
    if freezer.delegates:
        # Not in the table, which would hand this module another module's objects.
        return Static(value, freezer.has_array, (*freezer.parts, DELEGATED))
    parts = tuple(freezer.parts)
    key = _table_key(parts, tuple(freezer.changeable))
    with _lock:
        anchor = _table.get(key)
        if anchor is None:
            found = Static(value, freezer.has_array, parts)
            _table[key] = found[3]
        else:
            found = anchor.static
    return found


def freeze(obj: Any, leaf: _Leaf | None = None, path: Any = None) -> Any:
    """The canonical form of a static value that a plain `equinox.Module` stores: hashable,
    type-exact, and read back as the original (see `_canonical.py`). Lists, dicts, sets,
    frozensets, NumPy arrays and scalars, at any depth, become the one canonical form of their
    class; tuples and NamedTuples stay what they are, holding canonical forms; everything else
    is passed to `leaf`. A canonical value is returned as it is.

    **Arguments:**

    - `obj`: the value of a static field.
    - `leaf`: called as `leaf(x, path)` on every other value; by default the value is kept.
    - `path`: where `obj` is, passed on to `leaf` as `(path, index)`, `(path, (key,))` or
        `(path, "{...}")` for an element of a list, dict or set, so that `leaf` can name the
        place of a bad value (see `field_path` in `_stabilize.py`).

    **Returns:**

    The frozen value.
    """
    t = type(obj)
    if t in _ATOMS:
        return obj
    key = key_of(obj)
    if _reusable(key) and _forms.get(key) is obj:
        return obj
    return _Freezer(_keep if leaf is None else leaf, canonical=True)(obj, path)


def _restore(value: Any) -> Static:
    # Unpickling and copying: the leaves in a canonical value are canonical already, except
    # copies of them (a deep copy), which `intern` maps back.
    from .._registry import intern

    return freeze_static(value, lambda x, _: intern(x))


def thaw(obj: Any) -> Any:
    """The value a static field reads back as: `Static.read()`, else `obj` itself."""
    return obj.read() if type(obj) is Static else obj
