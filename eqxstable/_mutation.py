"""Noticing that a static object was changed in place after it was keyed.

A key is computed once, when a compiled program is made; the program bakes in what the static
object computed *then*. Some changes keep the object (and so any identity key) the same while
changing what it computes: a closure cell rebound with `nonlocal`, an item assigned in a list that a
lambda captures, an attribute set on a plain config object. A `Snapshot` records, at keying time,
everything of that kind reachable from one object, and `changed()` says whether any of it moved.
"""

import dis
import functools as ft
import types
from typing import Any

import numpy as np

from ._keys import _fn_state, _JAX_LIBRARIES, _still_valid, compute_key


# Globals of these kinds are definitions, not data: rebinding them is not worth a check per call.
_DEFINITIONS = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)


def _from_library_module(obj: Any) -> bool:
    module = getattr(obj, "__module__", None)
    if type(obj) is not types.FunctionType or not isinstance(module, str):
        return False
    return any(module == name or module.startswith(name + ".") for name in _JAX_LIBRARIES)


@ft.cache
def _global_names(code: types.CodeType) -> frozenset[str]:
    """The globals that `code` (and the functions defined in it) loads. Not `co_names`, which
    also holds attribute names: `model.weight` must not make a global `weight` look read."""
    names = {
        ins.argval
        for ins in dis.get_instructions(code)
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str)
    }
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return frozenset(names)


def _globals_read(watch: tuple) -> list[tuple[dict, str, Any]]:
    """The data globals (not modules, classes or functions) that the watched functions read:
    a compiled program bakes in their values, so rebinding or changing one must be noticed."""
    found = []
    for obj, state_fn, _ in watch:
        if state_fn is not _fn_state:
            continue
        namespace = obj.__globals__
        for name in _global_names(obj.__code__):
            value = namespace.get(name, _fn_state)
            if value is not _fn_state and not isinstance(value, _DEFINITIONS):
                found.append((namespace, name, value))
    return found


def _fingerprint(obj: Any) -> tuple[Any, list[Any]]:
    """A type-exact key of the current contents of a mutable object, and the mutable objects
    reachable from those contents (to be fingerprinted in turn)."""
    if isinstance(obj, list):
        contents: Any = tuple(obj)
    elif isinstance(obj, dict):
        contents = tuple(obj.items())
    elif isinstance(obj, set):
        contents = frozenset(obj)
    elif isinstance(obj, bytearray):
        contents = bytes(obj)
    elif isinstance(obj, np.ndarray):
        contents = obj if not obj.dtype.hasobject else tuple(obj.ravel().tolist())
    else:
        attrs = getattr(obj, "__dict__", None)
        slots = tuple(
            getattr(obj, name, None)
            for cls in type(obj).__mro__
            for name in getattr(cls, "__slots__", ())
            if isinstance(name, str) and name not in ("__dict__", "__weakref__")
        )
        try:
            own_hash = hash(obj)
        except Exception:
            own_hash = None
        contents = (tuple(sorted(attrs.items())) if attrs else (), slots, own_hash)
    key, ctx = compute_key(contents, use_memo=False)
    return key, ctx.mutables


def _describe(obj: Any) -> str:
    text = repr(obj)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(obj).__name__} {text}"


class Snapshot:
    """What can change in place under one object's key. See [`snapshot_mutables`][]."""

    __slots__ = ("_root", "_watch", "_globals", "_parts")

    def __init__(self, root: Any, watch: tuple, globals_read: list, parts: list[tuple[Any, Any]]):
        self._root = root
        self._watch = watch
        self._globals = globals_read
        self._parts = parts

    def changed(self) -> str | None:
        """`None` if nothing changed since the snapshot, else a sentence saying what did."""
        if not _still_valid(self._watch):
            return (
                f"{_describe(self._root)} had a closure variable, default or attribute rebound "
                "after it was used"
            )
        for namespace, name, value in self._globals:
            if namespace.get(name, _fn_state) is not value:
                root = _describe(self._root)
                return f"the global `{name}` read by {root} was rebound after it was used"
        for obj, fingerprint in self._parts:
            if _fingerprint(obj)[0] != fingerprint:
                where = "" if obj is self._root else f", reachable from {_describe(self._root)},"
                return f"{_describe(obj)}{where} was changed in place after it was used"
        return None

    def __len__(self) -> int:
        """How many objects are checked: the cost of `changed()` grows with it."""
        return len(self._watch) + len(self._globals) + len(self._parts)


def snapshot_mutables(obj: Any) -> Snapshot | None:
    """Records everything reachable from `obj` that could change what it computes without
    changing its identity.

    **Arguments:**

    - `obj`: a static value, e.g. a leaf given to a jitted function.

    **Returns:**

    `None` when nothing reachable from `obj` can change in place (numbers, strings, tuples of
    those, pure functions of module globals), else a `Snapshot` whose `changed()` says whether
    and what changed.
    """
    _, ctx = compute_key(obj, use_memo=False)
    # Functions of JAX, Equinox and optax (`eqx.nn.MLP`'s default final activation, say) are
    # not rebound in place; checking them would cost every call of a jitted function.
    watch = tuple(w for w in ctx.watch if not _from_library_module(w[0]))
    globals_read = _globals_read(watch)
    parts: list[tuple[Any, Any]] = []
    seen: set[int] = set()
    pending = list(ctx.mutables)
    for _, _, value in globals_read:
        # A global array is keyed by contents at top level; here it is data that can change.
        is_array = isinstance(value, np.ndarray)
        pending.extend([value] if is_array else compute_key(value, use_memo=False)[1].mutables)
    while pending:
        mutable = pending.pop()
        if id(mutable) in seen:
            continue
        seen.add(id(mutable))
        fingerprint, nested = _fingerprint(mutable)
        parts.append((mutable, fingerprint))
        pending.extend(nested)
    if not watch and not parts:
        return None
    return Snapshot(obj, watch, globals_read, parts)
