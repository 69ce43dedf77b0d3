"""A cheap per-call guard in front of `Snapshot.changed()`.

`Snapshot.changed()` recomputes a type-exact key of the contents of every mutable part it
watches. That is right but costs ~50 us for, e.g., the `__dict__` of `jax.nn.relu` (a `custom_jvp`
object), on every call. The hit path instead runs a flat list of identity checks, made once when
the entry is made:

- the snapshot's own watch list (closure cells, defaults, attributes of the static itself) and
  the data globals it reads;
- each mutable part's *direct* contents (a list's items, a dict's keys and values, an object's
  attributes and slots): every mutable object a part holds is itself a part, so it is checked
  in turn;
- for what the parts reach through immutable containers (tuples, NamedTuples, frozensets, frozen
  dataclasses, bound methods): functions, partials, `jax.jit` functions and Equinox modules, whose
  key could change while they stay the same object, contribute the watch list that `stable_key`
  memoised for them. Anything else there is keyed by identity or by an immutable class's
  equality, so its key cannot change while it is the same object.

Only when one of these moved is the snapshot asked for the authoritative answer (and the checks
are rebuilt if it says nothing changed, e.g. a tuple replaced by an equal one). This reads what
the snapshot and the key memo recorded; where that is not available, it asks `changed()`.
"""

import dataclasses
import functools as ft
import operator
import types
import weakref
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import numpy as np

from . import _keys
from ._keys import stable_key


_is = operator.is_
_ref = weakref.ref
_ATOMS = (int, float, complex, str, bytes, type(None), type, bool, types.ModuleType)
_REKEYED = (types.FunctionType, ft.partial, type(jax.jit(lambda: None)), eqx.Module)
_slot_names: dict[type, tuple[str, ...]] = {}


class _NotCheap(Exception):
    pass


def _slots_of(cls: type) -> tuple[str, ...]:
    names = _slot_names.get(cls)
    if names is None:
        names = _slot_names[cls] = tuple(
            name
            for c in cls.__mro__
            for name in getattr(c, "__slots__", ())
            if isinstance(name, str) and name not in ("__dict__", "__weakref__")
        )
    return names


def _list_state(obj: list) -> tuple:
    return tuple(obj)


def _dict_state(obj: dict) -> tuple:
    return (len(obj), *obj.keys(), *obj.values())


def _attrs_state(obj: Any) -> tuple:
    attrs = obj.__dict__
    return (len(attrs), *attrs.keys(), *attrs.values())


def _object_state(obj: Any) -> tuple:
    attrs = getattr(obj, "__dict__", None)
    slots = tuple(getattr(obj, name, None) for name in _slots_of(type(obj)))
    if attrs is None:
        return slots
    return (len(attrs), *attrs.keys(), *attrs.values(), *slots)


def _state_fn(obj: Any) -> Callable[[Any], tuple]:
    if isinstance(obj, list):
        return _list_state
    if isinstance(obj, dict):
        return _dict_state
    if isinstance(obj, (set, bytearray, np.ndarray)):
        # Their contents change without any identity changing.
        raise _NotCheap
    if not _slots_of(type(obj)) and isinstance(getattr(obj, "__dict__", None), dict):
        return _attrs_state
    return _object_state


def _reachable(contents: tuple, seen: set[int], checks: list) -> None:
    """Adds the watch lists for what `contents` reach through immutable containers. `seen`
    starts as the ids of the parts (checked on their own) and avoids checking one object
    twice."""
    for x in contents:
        if isinstance(x, _ATOMS) or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, _REKEYED):
            stable_key(x)
            memo = _keys._memo.get(id(x))
            if memo is None or memo.ref() is not x:
                raise _NotCheap
            checks.append(memo.watch)
        elif isinstance(x, (tuple, frozenset)):
            _reachable(tuple(x), seen, checks)
        elif isinstance(x, types.MethodType):
            _reachable((x.__func__, x.__self__), seen, checks)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            fields = dataclasses.fields(x)
            _reachable(tuple(getattr(x, f.name, None) for f in fields), seen, checks)


class MutationCheck:
    """Says whether anything watched by a `Snapshot` changed, cheaply when nothing did."""

    __slots__ = ("snapshot", "_checks", "_globals")

    def __init__(self, snapshot: Any):
        self.snapshot = snapshot
        self._build()

    def _build(self) -> None:
        snapshot = self.snapshot
        try:
            watches: list = [snapshot._watch]
            checks: list = []
            parts = snapshot._parts
            seen = {id(obj) for obj, _ in parts}
            for obj, _ in parts:
                state_fn = _state_fn(obj)
                state = state_fn(obj)
                checks.append((obj, state_fn, state))
                _reachable(state, seen, watches)
            # One flat list without repeats: the watch lists of a `jax.jit` function and of the
            # function it wraps share entries, and each entry costs a state computation.
            # The states are read again now (the key memo may hold weak references, and the
            # snapshot and `stable_key` were both validated just now, so nothing moved since).
            known = {(id(obj), fn) for obj, fn, _ in checks}
            for watch in watches:
                for holder, state_fn, _ in watch:
                    obj = holder() if type(holder) is _ref else holder
                    if obj is None:
                        raise _NotCheap
                    if (id(obj), state_fn) not in known:
                        known.add((id(obj), state_fn))
                        checks.append((obj, state_fn, state_fn(obj)))
            self._checks: tuple | None = tuple(checks)
            self._globals = tuple(snapshot._globals)
        except (_NotCheap, AttributeError):
            self._checks = None
            self._globals = ()

    def changed(self) -> str | None:
        """`None` if nothing changed, else what did (from `Snapshot.changed()`)."""
        checks = self._checks
        if checks is None:
            return self.snapshot.changed()
        for obj, state_fn, state in checks:
            now = state_fn(obj)
            if len(now) != len(state) or not all(map(_is, now, state)):
                return self._ask()
        for namespace, name, value in self._globals:
            if namespace.get(name, _is) is not value:
                return self._ask()
        return None

    def _ask(self) -> str | None:
        what = self.snapshot.changed()
        if what is None:
            # Replaced by equal contents (e.g. a new but equal tuple): check the new ones.
            self._build()
        return what
