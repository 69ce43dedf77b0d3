"""The mutable objects a `StableModule` was given for its static fields, and the check that a
read of such a field makes of them: changed since, it raises (a change is never silently lost).

A static field holds a frozen copy (a `Static`) of the list, dict, set or NumPy array it was
assigned, so the module cannot follow a later change the program makes to *that* object
(`widths = [16, 16]; net = Net(widths); widths.append(16)`), which an `eqx.Module` holding the
list itself would follow. So the module object keeps, per field, the containers it was given
(every `list`, `dict`, `set` and `np.ndarray` reached through lists, tuples, NamedTuples, dict
values and object arrays; the same objects an `eqx.Module` would hold, so nothing more is kept
alive than there) with a snapshot of what each held: its items by identity, for an array the
frozen read-only copy the `Static` holds already (no copy is made). Every read of the field on
that module object first checks them, and raises an error that names the field and the fix if
one has changed. The cost is one pass over the given containers per read, as `_handed.py`
makes over the copy it handed out: identity over the items of a list or dict, and for an array
a comparison of its bytes with the frozen copy, in C, in slices (no copy of the array).

The table is keyed by the module object and held weakly (as `_handed`), so nothing is added to
the module's `__dict__`, and an entry goes with its module. **Not seen:** a read through another
module object made from this one (`copy`, `pickle`, `jax.tree.unflatten`, hence the trace of
`equinox.filter_jit` or `eqxstable.filter_jit`, which reads an unflattened module; `eqx.tree_at`,
`dataclasses.replace`), nor a container the value holds inside some other object (which is kept
as that very object, so there is nothing to diverge). `eqxstable.stabilize` of a plain module
builds a new module whose static containers are a snapshot taken at that call.
"""

import functools as ft
import operator
import reprlib
import sys
import weakref
from typing import Any

import numpy as np

from .._keys._layout import frozen_copy, layout
from ._handed import _same_atom
from ._paths import type_name
from ._plain import MAX_DEPTH
from ._static import Static


MSG_GIVEN_CHANGED = (
    "`{path}`: the {kind} given to the static field `{field}` of the `eqxstable.StableModule` "
    "`{cls}` was changed in place after the module was built: {what}. A static field is part of "
    "the PyTree structure, which a compiled program was traced for, so the module keeps the "
    "value it was built with ({was}) and cannot follow the change. Build a module with the new "
    "value instead (`{cls}(...)` anew, or `dataclasses.replace(module, {field}=...)`), assign "
    "a tuple if the value is fixed, or make `{field}` a regular (not static) field."
)

# `id(module)` -> (a weak reference to the module, {field name: (its `Static`, the watches)}).
_given: dict[int, tuple[weakref.ref, dict[str, tuple[Any, tuple]]]] = {}

_is = operator.is_
_LIST, _DICT, _SET, _ARRAY, _OBJECTS, _VOID = range(6)
_KIND_NAMES = {
    _LIST: "list",
    _DICT: "dict",
    _SET: "set",
    _ARRAY: "array",
    _OBJECTS: "array",
    _VOID: "structured scalar (a view into its array)",
}
# Bytes compared per slice of an array: `array_equal` makes a boolean array as long as its
# inputs, so a big array is compared a slice at a time.
_SLICE = 1 << 19
_repr = reprlib.Repr()
_repr.maxlist = _repr.maxdict = _repr.maxtuple = 8
_repr.maxstring = _repr.maxother = 60


def remember(obj: Any, name: str, given: Any, static: Any) -> None:
    """Keeps, for the module `obj`, the containers in `given` (what was assigned to its static
    field `name`) that the frozen form `static` stands for, to be checked on every read.

    **Arguments:**

    - `obj`: the module, under construction.
    - `name`: the field's name.
    - `given`: the value as assigned.
    - `static`: what the field now holds (a `Static`, or the value itself).
    """
    frozen = static[0] if type(static) is Static else static
    watches: list[tuple] = []
    _collect(given, frozen, "", watches, set(), 0)
    i = id(obj)
    entry = _given.get(i)
    if not watches:
        if entry is not None and entry[0]() is obj:
            entry[1].pop(name, None)  # Assigned again, with nothing to watch now.
        return
    if entry is None or entry[0]() is not obj:
        try:
            ref = weakref.ref(obj, ft.partial(_forget, i))
        except TypeError:  # Not weakly referenceable: nothing to key the watches by.
            return
        entry = _given[i] = (ref, {})
    entry[1][name] = (static, tuple(watches))


def _forget(i: int, ref: weakref.ref) -> None:
    # Called as the module dies, before its `id` can be another object's.
    entry = _given.get(i)
    if entry is not None and entry[0] is ref:
        del _given[i]


def _collect(given: Any, frozen: Any, where: str, out: list, seen: set, depth: int) -> None:
    """Appends `(kind, container, snapshot, where)` for every container in `given`, walking it
    side by side with its frozen form (the same shape: `_freezer.py` made one from the other)."""
    if depth > MAX_DEPTH or given is frozen:
        return  # Deeper, the freezer kept the object itself; the same object cannot diverge.
    depth += 1
    t = type(given)
    if t is list or t is dict or t is set or t is np.ndarray:
        if id(given) in seen:
            return
        seen.add(id(given))
    if t is list:
        out.append((_LIST, given, tuple(given), where))
        if isinstance(frozen, list) and len(frozen) == len(given):
            for k, (a, b) in enumerate(zip(given, frozen)):
                _collect(a, b, f"{where}[{k}]", out, seen, depth)
    elif t is dict:
        out.append((_DICT, given, (tuple(given), tuple(given.values())), where))
        if isinstance(frozen, dict) and len(frozen) == len(given):
            for (k, a), b in zip(given.items(), dict.values(frozen)):
                _collect(a, b, f"{where}[{k!r}]", out, seen, depth)
    elif t is set:
        out.append((_SET, given, tuple(given), where))  # Its items are hashable: no containers.
    elif t is np.ndarray:
        if given.dtype.hasobject:
            items = list(given.flat)
            out.append((_OBJECTS, given, (given.shape, tuple(items)), where))
            if isinstance(frozen, np.ndarray) and frozen.size == given.size:
                for k, (a, b) in enumerate(zip(items, frozen.flat)):
                    _collect(a, b, f"{where}.flat[{k}]", out, seen, depth)
        else:
            if not (
                type(frozen) is np.ndarray
                and not frozen.flags.writeable
                and frozen.shape == given.shape
                and frozen.dtype == given.dtype
            ):
                # Not the frozen copy expected (never seen): a private one to compare with,
                # laid out as `given` is (`_same_array` compares the layouts).
                frozen = frozen_copy(given)
            out.append((_ARRAY, given, frozen, where))
    elif t is np.void and given.base is not None:
        # A structured scalar is a view into its array, which can change under it.
        out.append((_VOID, given, given.tobytes(), where))
    elif isinstance(given, tuple) and (t is tuple or hasattr(given, "_make")):
        if isinstance(frozen, tuple) and len(frozen) == len(given):
            for k, (a, b) in enumerate(zip(given, frozen)):
                _collect(a, b, f"{where}[{k}]", out, seen, depth)


def check_given(obj: Any, name: str, static: Any) -> None:
    """Raises if a container given to the static field `name` of the module `obj` (which now
    holds `static`) has changed since the module was built; does nothing otherwise."""
    entry = _given.get(id(obj))
    if entry is None or entry[0]() is not obj:
        return
    held = entry[1].get(name)
    if held is None or held[0] is not static:
        return
    watches = held[1]
    for watch in watches:
        # Inline for a flat list (the usual static value): a call costs more than the check.
        if watch[0] is _LIST:
            if len(watch[1]) == len(watch[2]) and all(map(_is, watch[1], watch[2])):
                continue
        elif _unchanged(watch):
            continue
        what = _change(watch)
        if what is not None:
            _raise(obj, name, static, watch, what)
    if any(map(_lone, watches)):
        # Unchanged, and reachable only from here now (a literal `Net([16, 16])`, or the
        # program let go of it): nothing can change it any more, so it is neither checked nor
        # kept alive again.
        kept = tuple(w for w in watches if not _lone(w))
        if kept:
            entry[1][name] = (static, kept)
        else:
            entry[1].pop(name, None)  # Another thread may have dropped it already.


def _lone(watch: tuple) -> bool:
    """Whether only `watch` holds its container, which owns its items or memory (an array that
    is a view of another, or a structured scalar, shares memory that something else may hold)."""
    kind = watch[0]
    return _refs(watch) <= _LONE and (
        kind is _LIST or kind is _DICT or kind is _SET or watch[1].base is None
    )


def _refs(watch: tuple) -> int:
    return sys.getrefcount(watch[1])


# What `_refs` counts for a container that only its watch holds (measured, as the count depends
# on the interpreter).
_LONE = _refs((_LIST, [], (), ""))


def _unchanged(watch: tuple) -> bool:
    kind, given, snap, _ = watch
    if kind is _DICT:
        keys, values = snap
        return (
            len(given) == len(keys)
            and all(map(_is, given, keys))  # The keys in order (which is observable).
            and all(map(_is, given.values(), values))
        )
    if kind is _SET:
        return len(given) == len(snap) and all(map(_is, given, snap))
    if kind is _VOID:
        return given.tobytes() == snap
    if kind is _OBJECTS:
        shape, items = snap
        return given.shape == shape and all(map(_is, given.flat, items))
    return _same_array(given, snap)


def _same_array(a: np.ndarray, ref: np.ndarray) -> bool:
    """Whether `a` still holds the bytes of `ref` (its frozen copy), with its shape and dtype:
    compared in C, a slice at a time, without copying a contiguous array."""
    if a.shape != ref.shape or a.dtype != ref.dtype:
        return False
    if layout(a) != layout(ref):
        # Its strides assigned in place (`a.strides = ...`): what `np.ravel(a, order="K")` and
        # `a.flags` read, which the module's frozen copy (laid out as `a` was) cannot follow.
        return False
    if not a.flags.c_contiguous:
        return a.tobytes() == ref.tobytes()
    flat, base = a.reshape(-1).view(np.uint8), ref.reshape(-1).view(np.uint8)
    if flat.size % 8 == 0:
        flat, base = flat.view(np.uint64), base.view(np.uint64)
    n = flat.size
    return all(
        np.array_equal(flat[i : i + _SLICE], base[i : i + _SLICE]) for i in range(0, n, _SLICE)
    )


def _change(watch: tuple) -> str | None:
    """How `given` differs from its snapshot, or `None` where every item that is another object
    is an equal atom of the same type (a new `1000`, the same float bits): no change."""
    kind, given, snap, _ = watch
    if kind is _LIST or kind is _SET:
        items = list(given)
        if len(items) != len(snap):
            return f"it has {len(items)} items, not {len(snap)}: {_repr.repr(given)}"
        return None if all(map(_same_atom, snap, items)) else f"it holds {_repr.repr(given)}"
    if kind is _DICT:
        keys, values = snap
        if len(given) != len(keys) or not all(map(_same_atom, keys, given)):
            return f"its keys are {_repr.repr(list(given))}, not {_repr.repr(list(keys))}"
        if all(map(_same_atom, values, given.values())):
            return None
        return f"it holds {_repr.repr(given)}"
    if kind is _OBJECTS:
        shape, items = snap
        if given.shape != shape:
            return f"its shape is {given.shape}, not {shape}"
        return None if all(map(_same_atom, items, given.flat)) else "an item was replaced"
    if kind is _VOID:
        return "its contents changed"
    if given.shape != snap.shape or given.dtype != snap.dtype:
        return f"it is now of shape {given.shape} and dtype {given.dtype}"
    if layout(given) != layout(snap):
        return f"its strides are now {given.strides}, not {snap.strides}"
    return "its contents changed"


def _raise(obj: Any, name: str, static: Any, watch: tuple, what: str) -> None:
    kind, _, _, where = watch
    cls = type_name(type(obj))
    frozen = static[0] if type(static) is Static else static
    raise TypeError(
        MSG_GIVEN_CHANGED.format(
            path=f"{cls}.{name}{where}",
            kind=_KIND_NAMES[kind],
            field=name,
            cls=cls,
            what=what,
            was=_repr.repr(frozen),
        )
    )
