"""What makes a plain module's static list, dict, set or array its own object yet equal to every
other module's of its class (`_canonical.py`): the class's `Token`, and the snapshot of what
the object holds (`snapshot`), which its `==` and `hash` check (`intact`, `token_hash`), so
that a write by C code past its read-only methods (`heapq.heappush`, `list.append(x, ...)`)
takes it out of its class instead of changing every module's value."""

from collections.abc import Callable
from operator import is_
from typing import Any

import numpy as np

from ._paths import field_path
from ._readonly import ReadOnlyDict, ReadOnlyList, ReadOnlySet


class Token:
    """One equivalence class of the owned forms: what their `==` and `hash` go through. `key`
    is its table key (`_freezer.py`); `held` keeps alive the objects whose `id` the key holds
    (the first member's items), so no `id` in it is reused while the token lives."""

    __slots__ = ("key", "held", "__weakref__")

    def __init__(self, key: Any, held: Any):
        self.key = key
        self.held = held


def intact(obj: Any) -> bool:
    """Whether an owned form (`OWNED`) still holds, by identity, what `freeze` put in it, its
    inner read-only containers and array views included (C code such as `heapq.heappush` or
    `list.append(x, 1)` writes into a list subclass past its read-only methods). Other forms
    cannot change: always true."""
    snap = getattr(obj, "_snap", None)
    if snap is None:
        return True
    own, inner, kind = snap
    # A list or dict where it is (the hit path of a rebuilt module: JAX's cache asks `==`),
    # without the tuple of all its items that its state function builds.
    if kind is list:
        if len(obj) != len(own) or not all(map(is_, obj, own)):
            return False
    elif kind is dict:
        n = len(obj)
        if n + n != len(own) or not all(map(is_, obj, own)):
            return False
        if not all(map(is_, dict.values(obj), own[n:])):
            return False
    else:
        state = STATES[type(obj)](obj)
        if len(state) != len(own) or not all(map(is_, state, own)):
            return False
    for x, was in inner:
        now = STATES[type(x)](x)
        if len(now) != len(was) or not all(map(is_, now, was)):
            return False
    return True


def _list_state(x: Any) -> tuple:
    return tuple(list.__iter__(x))


def _dict_state(x: Any) -> tuple:
    return (*dict.keys(x), *dict.values(x))


def _set_state(x: Any) -> tuple:
    # The table as C code sees it, and the order the form iterates in (a slot).
    return (x._order, *set.__iter__(x))


def _array_state(x: Any) -> tuple:
    return (x.base, x.dtype, *x.shape, None, *x.strides)


def snapshot(value: Any, inner: list) -> tuple:
    """What `intact` compares: `value`'s own state and that of the read-only containers and
    array views inside it (`inner`), made for it alone by the same walk."""
    kind = list if isinstance(value, list) else dict if isinstance(value, dict) else None
    return (STATES[type(value)](value), tuple((x, STATES[type(x)](x)) for x in inner), kind)


# How `intact` reads the state of each owned form (`_canonical.py` adds its classes), and of the
# read-only containers and array views inside one.
STATES: dict[type, Callable[[Any], tuple]] = {
    ReadOnlyList: _list_state,
    ReadOnlyDict: _dict_state,
    ReadOnlySet: _set_state,
    np.ndarray: _array_state,
}


def _kind_name(cls: type) -> str:
    for base in cls.__mro__:
        if base.__module__ == "builtins":
            return base.__name__
        if base.__module__ == "numpy":
            return f"numpy.{base.__name__}"
    return cls.__name__


MSG_CHANGED_IN_PLACE = (
    "The static field `{where}` (a {kind} of a module passed through `eqxstable.stabilize`) was "
    "changed in place, past its read-only methods (by C code such as `heapq.heappush`, "
    "`list.append(x, ...)`, `dict.__setitem__(x, ...)` or `set.add(x, ...)`): a program compiled "
    "for its old value must not run for it, and it can no longer be hashed. Change a copy "
    "instead (`{kind}(...)` of it), or build a new module with the new value (`eqx.tree_at`)."
)


def token_hash(self: Any) -> int:
    # The originals cannot be hashed: only a form that `freeze` made, by its class's token
    # (every member of the class hashes alike), while it holds what it was made with.
    token = getattr(self, "_token", None)
    if token is None:
        raise TypeError(f"unhashable type: {_kind_name(type(self))!r}")
    if not intact(self):
        where = field_path(getattr(self, "_where", None) or "?")
        raise TypeError(MSG_CHANGED_IN_PLACE.format(where=where, kind=_kind_name(type(self))))
    return object.__hash__(token)
