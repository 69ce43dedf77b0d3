"""Containers in which nothing can ever change (exact tuples and frozensets of immutable scalars,
and lists, dicts and sets of such items): past the object budget, `_context.top` keys the outermost
one by its identity (`frozen_scalars`, `frozen_items`), a sound key with little or nothing to watch.
"""

import operator
from collections.abc import Callable
from itertools import chain
from typing import Any

from ._per_class import type_ids
from ._watch import size


# What `frozen_scalars` accepts: immutable values with nothing inside, and the exact immutable
# containers of them (no subclass: it could hold attributes). All by the types' identities
# (`type_ids`), as are the type scans below: a user's metaclass may call its class equal to one.
_ATOMS = type_ids((int, str, bytes, bool, float, complex, type(None)))
_FROZEN = type_ids((tuple, frozenset))
# The containers that can change in place which `held_items` keys past the budget.
_HELD = type_ids((list, dict, set))
_DICT = id(dict)
_DICTS = frozenset({_DICT})
_ATOMS_OR_FROZEN = _ATOMS | _FROZEN


def frozen_scalars(obj: Any) -> bool:
    """Whether `obj` is an exact `tuple` or `frozenset` holding, all the way down, only exact
    tuples, frozensets and the immutable scalars of `_ATOMS`: nothing in it can ever change, so
    its identity is a sound key. Linear in the distinct containers, one level at a time: the
    types of a whole level's items are scanned in C (a million pairs in a fraction of a second,
    not a Python loop per pair), without recursion."""
    if id(type(obj)) not in _FROZEN:
        return False
    seen = {id(obj)}
    level = [obj]
    while level:
        types = set(map(id, map(type, chain.from_iterable(level))))
        if not types <= _ATOMS_OR_FROZEN:
            return False
        if types.isdisjoint(_FROZEN):
            return True
        inner = {id(y): y for y in chain.from_iterable(level) if id(type(y)) in _FROZEN}
        level = [y for i, y in inner.items() if i not in seen]
        seen.update(inner)
    return True


def _items(obj: Any) -> tuple:
    if type(obj) is dict:
        return (*obj.keys(), *obj.values())
    return tuple(obj)


def frozen_items(obj: Any) -> bool:
    """Whether `obj` is an exact `list`, `dict` or `set` whose items (a dict's keys and values)
    are all what `frozen_scalars` accepts: past the budget it is keyed by `held_items`."""
    return id(type(obj)) in _HELD and frozen_scalars(_items(obj))


def _items_state(obj: Any) -> tuple:
    if type(obj) is dict:
        return (size(len(obj)), *obj.keys(), *obj.values())
    return (size(len(obj)), *obj)


def frozen_nested(obj: Any) -> bool:
    """Whether `obj` is an exact `list`, `dict` or `set` whose items are what `frozen_scalars`
    accepts or containers that `frozen_items` accepts (a vocabulary of 60,000 small dicts, a
    list of small lists): past the budget it is keyed by `held_items` one level further down."""
    if id(type(obj)) not in _HELD:
        return False
    for x in _items(obj):
        t = id(type(x))
        if t in _ATOMS or (t in _FROZEN and frozen_scalars(x)) or frozen_items(x):
            continue
        return False
    return True


def _held_among(part: Any) -> Any:
    # The held containers among `part`, in order: all or none of them in most (scanned in C),
    # a loop in Python only for a mix. The types by their `id`s: a watch state computed on every
    # hit, whose items come first (compared by `is`), so a metaclass's `==` merging two types
    # here could not hide a change, but a set of the types themselves would run it.
    types = set(map(id, map(type, part)))
    if types <= _HELD:
        return part, types
    if types.isdisjoint(_HELD):
        return (), types
    return [x for x in part if id(type(x)) in _HELD], types


def _nested_state(obj: Any) -> tuple:
    """`_items_state` one level further down: the items, then each held container's length and
    then all their items in order, read in C (`map`, `chain`) but for the lengths of long ones.
    A dict's keys and values both; equal states are equal contents, item by item by `is`. A
    dict's keys and a set's items are hashable, never a list, dict or set: the held containers
    are among a dict's values or a list's items only, scanned alone (a 100,000-entry table of
    lists: no loop in Python)."""
    items = _items(obj)
    t = type(obj)
    if t is dict:
        inner, types = _held_among(list(obj.values()))
    elif t is set:
        inner, types = (), frozenset()
    else:
        inner, types = _held_among(items)
    dicts: Any = (
        ()
        if _DICT not in types
        else inner
        if types == _DICTS
        else [x for x in inner if type(x) is dict]
    )
    lengths = list(map(len, inner))
    if lengths and max(lengths) > 256:
        lengths = list(map(size, lengths))
    return (
        size(len(items)),
        *items,
        *lengths,
        *chain.from_iterable(inner),
        *chain.from_iterable(map(dict.values, dicts)),
    )


class _Held:
    """Items compared by identity (`is`), never by their `==` (`1 == 1.0 == True`); hashed by
    their `id`s, computed once."""

    __slots__ = ("items", "_hash")

    def __init__(self, items: tuple):
        self.items = items
        self._hash: int | None = None

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash(tuple(map(id, self.items)))
        return h

    def __eq__(self, other: object) -> bool:
        if type(other) is not _Held:
            return False
        a, b = self.items, other.items
        return a is b or (len(a) == len(b) and all(map(operator.is_, a, b)))

    def __repr__(self) -> str:
        return f"<{len(self.items)} items by identity>"


# `K-too-deep`: the containers `held_items` keyed, by `id`, each with the state it held then and
# its `_Held` items: a rebuilt reader of the same unchanged global vocabulary reuses them rather
# than walking it again up to the budget and starting over (200,000 pairs: 1.5 s a reader).
# Only containers of at least `MEMO_MIN` items; the latest `MEMO_SIZE` of them.
MEMO_MIN = 1024
MEMO_SIZE = 16
_held_memo: dict[int, tuple[type, Callable[[Any], tuple], tuple, _Held]] = {}


def remember_held(obj: Any, state_fn: Callable[[Any], tuple], state: tuple, held: _Held) -> None:
    """After `held_items` keyed `obj` by `held`: remembered while it holds `state`."""
    if len(obj) < MEMO_MIN:
        return
    _held_memo.pop(id(obj), None)
    _held_memo[id(obj)] = (type(obj), state_fn, state, held)
    while len(_held_memo) > MEMO_SIZE:
        try:
            _held_memo.pop(next(iter(_held_memo)), None)
        except (RuntimeError, StopIteration):  # Changed by another thread meanwhile.
            break


def recall_held(obj: Any) -> tuple[Callable[[Any], tuple], tuple, _Held] | None:
    """What `held_items` found for `obj` if it holds now, item by item by `is`, what it held
    then. Sound whatever became of the object remembered: the state holds every item (and, for
    `frozen_nested`, every container it holds and their items), so no other object takes their
    `id`s; a container of the same type holding those very objects passes `frozen_items` (or
    `frozen_nested`) as it did, since what they are cannot change, and its key is its own
    identity with those items (`_Held`), equal to what `held_items` gives it cold."""
    entry = _held_memo.get(id(obj))
    if entry is None or entry[0] is not type(obj):
        return None
    _, state_fn, state, held = entry
    now = state_fn(obj)
    if len(now) != len(state) or not all(map(operator.is_, now, state)):
        return None
    return state_fn, state, held
