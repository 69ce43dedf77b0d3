"""What a `StableModule` hands out when its code reads a static list or dict, and how a change
made to it in place is caught.

A read hands out a plain `list` or `dict` (`_plain.py`: JAX sees only an exact `list` as a list),
which cannot refuse a change. So that a change is never silently lost, each module object hands
out **one** copy per field: the first read makes it and keeps it in a table keyed by the module
object (`_handed`, held weakly: an entry goes when its module does, and nothing in the module's
`__dict__` changes, which Equinox's flatten, copies and pickles read). Every later read of that
field on that module first checks that the copy still is the frozen value, item by item and by
identity (the copy shares the frozen value's leaves, so `1` replaced by `1.0` or `True` is a
change), and raises an error that names the field and says the fix if it is not. The check is
one pass over the value (C-fast `map(operator.is_, ...)` for a flat list or dict).

A module made from another (`copy`, `pickle`, `jax.tree.unflatten`, `eqx.tree_at`,
`dataclasses.replace`) is another object, so it starts with fresh copies. What this cannot see:
a change made to the copy and never read again from the same module object, e.g. a module passed
to `jit` afterwards, whose trace reads the field on an unflattened module (Equinox's flatten has
no hook); the docs say to build a new module to change a static value.
"""

import functools as ft
import math
import operator
import reprlib
import struct
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ._arrays import intact
from ._paths import type_name
from ._plain import MAX_DEPTH
from ._readonly import ReadOnlyDict, ReadOnlyList, ReadOnlySet


MSG_CHANGED = (
    "`{path}` was changed in place: {what}. `{field}` is a static field of the "
    "`eqxstable.StableModule` `{cls}`: part of the PyTree structure, which a compiled program was "
    "traced for, so the module keeps its value ({was}) and the {kind} that reading it handed out "
    "cannot change it. Build a module with the new value instead: `{cls}(...)` anew, or "
    "`dataclasses.replace(module, {field}=...)`; or make `{field}` a regular (not static) field."
)

# `id(module)` -> (a weak reference to the module, {field name: (its `Static`, the copy)}).
_handed: dict[int, tuple[weakref.ref, dict[str, tuple[Any, Any]]]] = {}

_is = operator.is_
_FLOAT = struct.Struct("<d")
_repr = reprlib.Repr()
_repr.maxlist = _repr.maxdict = _repr.maxtuple = 8
_repr.maxstring = _repr.maxother = 60


def hand_out(obj: Any, name: str, static: Any) -> Any:
    """What a read of the static field `name` of `obj` gives, where its `Static` `static` holds a
    list or dict: the copy handed out before, checked, or a new one.

    **Arguments:**

    - `obj`: the module.
    - `name`: the field's name.
    - `static`: the field's `Static` (its value, and on its anchor `read` and `check`).

    **Returns:**

    The copy: the same object on every read of this field of this module.
    """
    anchor = static[3]
    i = id(obj)
    entry = _handed.get(i)
    if entry is not None and entry[0]() is obj:
        held = entry[1].get(name)
        if held is not None and held[0] is static:
            copy = held[1]
            value = static[0]
            # Inline for a flat list or dict (the usual static value): a call costs more than
            # the check of a few items.
            kind = anchor.check
            if kind is _LIST:
                same = len(copy) == len(value) and all(map(_is, copy, value))
            elif kind is _ARRAY:
                same = intact(copy, value)
            elif kind is _DICT:
                same = (
                    len(copy) == len(value)
                    and all(map(_is, copy, value))  # The keys in order (which is observable).
                    and all(map(_is, copy.values(), dict.values(value)))
                )
            else:
                same = _difference(value, copy, "", {}, 0, _is) is None
            if not same:
                _raise_if_changed(obj, name, value, copy)
            return copy
    copy = anchor.read()
    if entry is None or entry[0]() is not obj:
        try:
            ref = weakref.ref(obj, ft.partial(_forget, i))
        except TypeError:  # Not weakly referenceable: a fresh copy per read.
            return copy
        entry = _handed.setdefault(i, (ref, {}))
    fields = entry[1]
    held = fields.setdefault(name, (static, copy))
    if held[0] is not static:  # The field was given another value since that read.
        fields[name] = held = (static, copy)
    return held[1]


def _forget(i: int, ref: weakref.ref) -> None:
    # Called as the module dies, before its `id` can be another object's.
    entry = _handed.get(i)
    if entry is not None and entry[0] is ref:
        del _handed[i]


_WALK, _LIST, _DICT, _ARRAY = 0, 1, 2, 3


def check_kind(value: Any) -> int:
    """How a read checks a copy of `value` (a frozen static value that `_plain.reader` copies),
    decided once: C-fast identity over a flat list or dict, else a walk."""
    t = type(value)
    if t is np.ndarray:
        return _ARRAY
    if t is ReadOnlyList and not any(map(_deep, value)):
        return _LIST
    if t is ReadOnlyDict and not any(map(_deep, dict.values(value))):
        return _DICT
    return _WALK


def _deep(x: Any) -> bool:
    return isinstance(x, (ReadOnlyList, ReadOnlyDict, ReadOnlySet, tuple, np.ndarray))


def _raise_if_changed(obj: Any, name: str, value: Any, copy: Any) -> None:
    # Not the very objects: say where the copy differs; an item replaced by one of the same type
    # and value (a new `1000`, the same float bits) is no change.
    found = _difference(value, copy, "", {}, 0, _same_atom)
    if found is None:
        return
    where, what = found
    cls = type_name(type(obj))
    kind = "dict" if isinstance(value, dict) else "list" if isinstance(value, list) else "value"
    if isinstance(value, set):
        kind = "set"
    if type(value) is np.ndarray:
        kind = "array"
    raise TypeError(
        MSG_CHANGED.format(
            path=f"{cls}.{name}{where}",
            what=what,
            field=name,
            cls=cls,
            was=_repr.repr(value),
            kind=kind,
        )
    )


def _same_atom(a: Any, b: Any) -> bool:
    if a is b:
        return True
    t = type(a)
    if t is not type(b):
        return False
    if t is float:
        return _FLOAT.pack(a) == _FLOAT.pack(b) or (math.isnan(a) and math.isnan(b))
    return t in (int, str, bytes, bool) and a == b


def _difference(
    value: Any, copy: Any, where: str, memo: dict[int, Any], depth: int, same: Callable
) -> tuple[str, str] | None:
    """Where `copy` (handed out) differs from `value` (frozen) and how, or `None`. A list or dict
    met twice in `value` was one copy, so it must be that copy in both places."""
    if depth > MAX_DEPTH:
        return None if copy is value else (where, f"it holds {_repr.repr(copy)}")
    depth += 1
    t = type(value)
    if t is ReadOnlyList or t is ReadOnlyDict:
        kind = list if t is ReadOnlyList else dict
        if type(copy) is not kind:
            return (where, f"it was replaced by {_repr.repr(copy)}")
        seen = memo.get(id(value))
        if seen is not None:
            return None if seen is copy else (where, "it was replaced by another object")
        memo[id(value)] = copy
        if kind is list:
            if len(copy) != len(value):
                return (where, f"it has {len(copy)} items, not {len(value)}: {_repr.repr(copy)}")
            for k, (a, b) in enumerate(zip(value, copy)):
                found = _difference(a, b, f"{where}[{k}]", memo, depth, same)
                if found is not None:
                    return found
            return None
        keys = list(dict.keys(value))
        if len(copy) != len(keys) or not all(map(same, copy, keys)):
            return (where, f"its keys are {_repr.repr(list(copy))}, not {_repr.repr(keys)}")
        for k, b in dict.items(copy):  # pyright: ignore[reportArgumentType]
            found = _difference(dict.__getitem__(value, k), b, f"{where}[{k!r}]", memo, depth, same)
            if found is not None:
                return found
        return None
    if t is ReadOnlySet:
        # The module's own copy (`_plain.py`), written into by C code (`set.add(s, x)`): its
        # items by identity (the frozen set holds its own, so no `id` is reused), and its order.
        if type(copy) is not ReadOnlySet or copy._order is not value._order:
            return (where, f"it was replaced by {_repr.repr(copy)}")
        items = list(set.__iter__(copy))
        if len(items) != len(value._order) or {id(x) for x in items} != set(map(id, value._order)):
            return (where, f"it holds {_repr.repr(set(items))}, not {_repr.repr(value)}")
        return None
    if t is np.ndarray:
        # A view of the module's own (`_arrays.own_view`): its attributes assigned in place.
        if intact(copy, value):
            return None
        return (where, "its `shape`, `dtype` or `strides` were assigned")
    if isinstance(value, tuple) and (t is tuple or hasattr(value, "_make")) and copy is not value:
        if type(copy) is not t or len(copy) != len(value):
            return (where, f"it was replaced by {_repr.repr(copy)}")
        for k, (a, b) in enumerate(zip(value, copy)):
            found = _difference(a, b, f"{where}[{k}]", memo, depth, same)
            if found is not None:
                return found
        return None
    if same(value, copy):
        return None
    return (where, f"it holds {_repr.repr(copy)} ({type(copy).__name__}), not {_repr.repr(value)}")
