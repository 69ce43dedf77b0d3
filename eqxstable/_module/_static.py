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

import copy
import threading
import weakref
from typing import Any

from ._delegate import DELEGATED, delegated
from ._freezer import Freezer, keep, Leaf, table_key
from ._handed import check_kind
from ._plain import reader


class _Anchor:
    """What the canonical table holds weakly: a tuple cannot be weakly referenced, so each
    `Static` holds one of these, which holds the `Static` (a cycle that the garbage collector
    clears once no module holds the `Static`)."""

    __slots__ = ("static", "read", "check", "__weakref__")


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
        # How a read makes a plain copy of the value's lists and dicts, if any (`_plain.py`), and
        # how a later read checks that copy (`_handed.py`).
        anchor.read = read = reader(value)
        anchor.check = None if read is None else check_kind(value)
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

    def __copy__(self) -> "Static":
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        # The canonical object holds only canonical, unchangeable leaves: it is its own copy (a
        # rebuilt set could iterate in another order). A delegated one holds the user's objects,
        # which a deep copy copies, as Equinox's would.
        return _restore(copy.deepcopy(self[0], memo)) if delegated(self[2]) else self

    def __repr__(self) -> str:
        return f"Static({self[0]!r})"


# `table_key(parts, changeable)` -> the anchor of the canonical `Static` with those parts.
_table: "weakref.WeakValueDictionary[tuple, _Anchor]" = weakref.WeakValueDictionary()
_lock = threading.RLock()

# Values whose `==` is already exact (equal only to equal values of the same type), stored as
# they are: wrapping them would only cost a descriptor call per read.
# By identity: a user's metaclass may call its class `str`.
_PLAIN = frozenset(map(id, (str, bool, type(None))))


def freeze_static(obj: Any, leaf: Leaf = keep, path: Any = None) -> Any:
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
    if id(t) in _PLAIN:
        return leaf(obj, path)
    freezer = Freezer(leaf, canonical=False)
    value = freezer(obj, path)
    if freezer.delegates:
        # Not in the table, which would hand this module another module's objects.
        return Static(value, freezer.has_array, (*freezer.parts, DELEGATED))
    parts = tuple(freezer.parts)
    key = table_key(parts, tuple(freezer.changeable))
    with _lock:
        anchor = _table.get(key)
        if anchor is None:
            found = Static(value, freezer.has_array, parts)
            _table[key] = found[3]
        else:
            found = anchor.static
    return found


def _restore(value: Any) -> Static:
    # Unpickling and copying: the leaves in a canonical value are canonical already, except
    # copies of them (a deep copy), which `intern` maps back.
    from .._registry import intern

    return freeze_static(value, lambda x, _: intern(x))


def thaw(obj: Any) -> Any:
    """The value a static field reads back as: `Static.read()`, else `obj` itself."""
    return obj.read() if type(obj) is Static else obj
