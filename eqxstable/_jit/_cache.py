"""The cache entries of one jitted program (`Cache`), and the per-call lookup (the hit path).

Each entry (`_entry.py`) stands for one set of static parts of a call.

The hit path costs one flatten, a type tuple, a few identity comparisons, and the entry's
`Watch`: a flat list of identity checks over everything the statics' keys depend on (closure
cells, the globals a function reads, a captured list's items). When one fails, the keys are
computed again: an equal key is still a hit (a global rebound to an equal value), another key
finds or makes another entry. A program is never reused unless every key it was made for holds.
"""

import operator
import struct
from typing import Any

import equinox as eqx

from .._compat import flat_module_aux
from .._keys import compute, compute_node_data, merge, new_call, Watch
from .._keys._per_class import type_ids
from .._keys._structure import same_structure, Structure, walk
from ._aliases import Aliases
from ._ambient import ambient
from ._config import untraced
from ._entry import Entry
from ._gc import collector_paused
from ._lru import LRU, sizes
from ._node_data import node_data, same_node_data
from ._pinned import fun_identity, pin_slot, pinned_twin, same_fun


_is = operator.is_
# Keep the most recent entries at hand for the identity fast path; older ones are found by key.
_RECENT = 8


class Cache:
    """The entries of one jitted program."""

    def __init__(self, donated_args: str, on_evict: Any = None):
        self.donated_args = donated_args
        # Bounded by the number of compiled programs the entries stand for (`CacheInfo.maxsize`);
        # the keys an entry is also found under after a trace changed its statics (`rekey`) are
        # kept apart, so that an entry weighs once.
        self.entries: LRU[Any, Entry] = LRU(_entries_bound, self._evicted, _weight)
        # The key a trace left its statics with (`rekey`), for the very objects that were
        # traced, until they are keyed otherwise (`_aliases.py`). An entry whose alias goes has
        # its watch fail, so that its next call with those objects is keyed again.
        self.aliases = Aliases(_entries_bound, _unwatch)
        self.recent: list[Entry] = []
        self._on_evict = on_evict
        # Whether the entries' watches are weak (`weaken`): while no wrapper calls the program.
        self.weak = False

    def _evicted(self, key: Any, entry: Entry) -> None:
        # An evicted entry is no longer served: its statics are found again by key (and traced
        # again) if they come back. JAX drops its programs from its own LRU in time.
        del key
        self.recent = [e for e in self.recent if e is not entry]
        self.aliases.drop_target(entry)
        if self._on_evict is not None:
            self._on_evict(entry)

    @property
    def currsize(self) -> int:
        """The number of compiled programs the held entries stand for (an entry that runs a
        program compiled for an equal trace counts once, as it holds that program too)."""
        return self.entries.total

    def compiled(self, entry: Entry) -> None:
        """After JAX compiled a program for `entry` (a miss)."""
        old = _weight(entry)
        entry.compiled += 1
        if self.entries.peek(entry.slot) is entry:
            self.entries.reweigh(old, entry)

    def reused(self, entry: Entry, reused: bool = True) -> None:
        """After the trace of `entry`'s miss found a program already compiled (`_reuse.py`): it
        stands for no program of its own (or, with `reused=False`, for one after all)."""
        old = _weight(entry)
        entry.compiled += -1 if reused else 1
        if self.entries.peek(entry.slot) is entry:
            self.entries.reweigh(old, entry)

    def bound(self, entry: Entry) -> None:
        """After a call that traced for `entry`: an entry whose programs alone (one per set of
        input types JAX compiled under its token) exceed the bound (`CacheInfo.maxsize`) is
        dropped with all of them, as the least recently used entries are dropped beyond it, so
        that the bound holds for the programs the cache serves; its next call makes it again,
        and traces. JAX's own cache, which JAX bounds, lets go of them in time."""
        if entry.compiled > sizes.entries and self.entries.peek(entry.slot) is entry:
            self.drop(entry)

    def clear(self) -> None:
        self.entries.clear()
        self.aliases.clear()
        self.recent = []

    def weaken(self) -> None:
        """While no live wrapper calls the program (`_sharing._released`): its entries' watches
        hold what they check weakly, so that a large array's copy (`_keys/README.md`,
        `K-array-reached`) goes with the last wrapper rather than with the program."""
        if not self.weak:
            self.weak = True
            for entry in self.entries.values():
                if entry.watched:
                    entry.watch = entry.watch.weak()

    def strengthen(self) -> None:
        """A wrapper calls the program again: each watch strong again (the hit path's identity
        checks), or, where something it held weakly is gone (a copy), one that fails, so that
        the next call keys its statics again (an equal key is still a hit)."""
        if self.weak:
            self.weak = False
            for entry in self.entries.values():
                if entry.watched:
                    watch = entry.watch.strong()
                    entry.watch = _CHANGED if watch is None else watch

    def pin(self, entry: Entry, parts: Any, why: str = "callback") -> None:
        """After a trace of `entry` whose program calls Python while it runs (`_pinned.py`), or
        whose output holds objects the trace made (`why="output"`, `_outputs.py`): it serves
        only the very objects it traced, those of `entry` and the function `parts`."""
        if entry.fun is not None:
            return
        entry.pinned_by = why
        entry.fun = fun_identity(parts)
        slot = pin_slot(entry.key, entry.statics, entry.data, entry.fun)
        if self.entries.peek(entry.slot) is entry:
            self.entries.pop(entry.slot)
            self.entries.set(slot, entry)
        entry.slot = slot

    def drop(self, entry: Entry) -> None:
        """A pinned entry something its key reads was rebound for (to an equal value, or the
        key would differ): the objects its program calls may no longer be the call's."""
        if self.entries.peek(entry.slot) is entry:
            self.entries.pop(entry.slot)
        self._evicted(entry.slot, entry)

    def drop_pinned(self) -> None:
        """After the function changed in a way its key does not see (a global it reads rebound
        to an equal value): every pinned entry may call objects that are no longer its."""
        for slot, entry in self.entries.items():
            if entry.fun is not None:
                self.entries.pop(slot)
                self._evicted(slot, entry)

    def lookup(self, leaves: list, treedef: Any, parts: Any = None) -> Entry:
        """The entry for a call with these flattened arguments (and function `parts`, which a
        pinned entry must have traced), made if there is none.

        A new entry made because a static changed in place (the same objects as a cached
        entry's, with another key now) says so in `.mutated`: its trace is a miss of kind
        `"mutated"`.
        """
        types = tuple(map(type, leaves))
        config = untraced()
        same = None
        for entry in self.recent:
            if entry.types != types or entry.config != config:
                continue
            try:
                same_tree = entry.treedef == treedef
            except Exception:  # Node data whose `==` raises (a NumPy array): compared below.
                same_tree = same_structure(entry.treedef, treedef)
            if (
                same_tree
                and all(map(_is, entry.static_of(leaves), entry.statics))
                and (not entry.check_data or entry.same_node_data(treedef, leaves))
                and (entry.fun is None or same_fun(entry.fun, parts))
            ):
                if not entry.watched or entry.watch.valid():
                    if entry is not self.recent[0]:
                        self._to_front(entry)
                    return entry
                same = entry
                if entry.fun is not None:
                    self.drop(entry)
                break
        entry, created = self._slow_lookup(leaves, treedef, parts, config)
        if created and same is not None:
            index, old, new = _changed(same.key, entry.key)
            if index is not None:
                index = [i for i, s in enumerate(entry.static_sel) if s][index]
            entry.mutated = (index, old, new)
        self._to_front(entry)
        return entry

    def _to_front(self, entry: Entry) -> None:
        # Rebuilt rather than edited in place, so that a thread iterating the old list (another
        # call of the same function) never sees it half-changed.
        self.recent = [entry, *(e for e in self.recent if e is not entry)][:_RECENT]

    def _slow_lookup(
        self, leaves: list, treedef: Any, parts: Any, config: Any
    ) -> tuple[Entry, bool]:
        mask = tuple(map(eqx.is_array, leaves))
        data = node_data(treedef, leaves)
        statics = [x for x, m in zip(leaves, mask) if not m]
        key, watch = _key(treedef, mask, statics, config)
        entry = self.entries.get(key)
        aliased = False
        if entry is None:
            entry = self.aliases.get(key, statics, data)
            aliased = entry is not None
        if not aliased:
            # These objects are keyed `key` now: an alias they had stands for a state they left.
            self.aliases.left(key, statics, data)
        if entry is None and parts is not None:
            entry = self.entries.get(pin_slot(key, statics, data, fun_identity(parts)))
        if entry is not None and entry.fun is not None:
            # Pinned: only its very objects (an alias may lead to one), and only while nothing
            # its key reads was rebound since its trace.
            if not (same_fun(entry.fun, parts) and _traced_these(entry, leaves, data)):
                entry = None
            elif entry.watched and not entry.watch.valid():
                self.drop(entry)
                entry = None
        if entry is not None:
            # An equivalent static (a rebuilt lambda, or the same one whose global was rebound
            # to an equal value): the entry holds the newest objects from now on.
            entry.adopt(treedef, leaves, data, watch)
            return entry, False
        entry = Entry(key, treedef, leaves, mask, data, watch, self.donated_args)
        # A copy made under the LRU's lock: another thread may add an entry right after it.
        entry.unpinned = pinned_twin(list(self.entries.values()), key, statics, data, mask)
        self.entries.set(key, entry)
        return entry, True

    def rekey(self, entry: Entry) -> None:
        """After a trace: what the function changed while traced (a `nonlocal` trace counter, a
        list it appends to) is part of the program, not a later change, so the entry is also
        found under the keys its statics have now. While the watch its statics were keyed with
        holds, nothing those keys read changed while traced: the keys are the ones it was found
        or made under (each static of a miss was keyed three times, the third time for
        nothing)."""
        if not self.weak and (not entry.watched or entry.watch.valid()):
            return
        key, watch = _key(entry.treedef, entry.dyn_sel, list(entry.statics), entry.config)
        if key != entry.key and self.entries.peek(key) is None:
            # Only for these very objects: an equivalent object rebuilt over the same shared
            # state (a list the trace appends to) has this key too, but it never ran the trace.
            self.aliases.set(key, entry, entry.statics, entry.data)
        else:
            self.aliases.left(key, entry.statics, entry.data)
        entry.watch = watch
        entry.watched = bool(watch)


# A watch that always fails: its entry's statics are keyed again on their next call.
_CHANGED = Watch(names=(({}, "changed", object()),))


def _traced_these(entry: Entry, leaves: list, data: list) -> bool:
    """Whether a call's statics and node data are the very objects a pinned entry traced."""
    return all(map(_is, entry.static_of(leaves), entry.statics)) and same_node_data(
        data, entry.data
    )


def _unwatch(entry: Entry) -> None:
    # The objects left the state an alias of `entry` stood for: its watch, taken in that state,
    # must not hold again should the user write that state back.
    entry.watch = _CHANGED
    entry.watched = True


def _entries_bound() -> int:
    return sizes.entries


def _weight(entry: Entry) -> int:
    return max(1, entry.compiled)


def _key(treedef: Any, mask: tuple, statics: list, config: Any) -> tuple[Any, Watch]:
    """The cache key of a call: its structure, which leaves are arrays, the static leaves' keys,
    the node data's keys, the keys of the user's classes among the node types (a module's
    methods run in the trace, and may read globals or class attributes), and the configuration
    JAX reads while tracing but leaves out of its own key (`_config.untraced`), last; before it,
    the ambient state a trace reads (`_ambient.py`: NumPy's error state, the warning filters)."""
    with collector_paused():
        return _compute_key(treedef, mask, statics, config)


def _compute_key(treedef: Any, mask: tuple, statics: list, config: Any) -> tuple[Any, Watch]:
    keys, watches = [], []
    for x in statics:
        t = type(x)
        if id(t) in _EXACT:
            # Immutable, and `==` is exact within the type: the value is the key, nothing to
            # watch (a call with thousands of fresh Python scalars pays no key context each).
            keys.append((t, x))
            continue
        if t is float:
            keys.append((t, _bits(x)))  # `0.0 == -0.0`, and a NaN is unequal to itself.
            continue
        k, w = compute(x)
        keys.append(k)
        watches.append(w)
    classes, data, shape = _walked(treedef)
    new_call()
    node_keys = []
    for d in data:
        k, w = compute_node_data(d)
        node_keys.append(k)
        watches.append(w)
    class_keys = []
    for c in classes:
        k, w = compute(c)
        class_keys.append(k)
        watches.append(w)
    key = (
        Structure(treedef, shape),
        mask,
        tuple(keys),
        tuple(node_keys),
        tuple(class_keys),
        _aliases(statics, data),
        # Only here, where objects are keyed anew: the hit path compares identities alone.
        ambient(),
        config,  # Last: `Entry.config`.
    )
    return key, merge(watches)


# The structure last walked, and what `walk` found in it: a miss keys its call twice, on lookup
# and after its trace (`rekey`), with the very same `PyTreeDef`, which cannot change (what its
# node data holds is keyed afresh each time). A vocabulary of 50,000 pairs is 150,000 nodes.
# One tuple, replaced whole: a thread reading it never sees another thread's half-made entry.
_last_walk: tuple = (None, None)


def _walked(treedef: Any) -> tuple:
    global _last_walk
    last = _last_walk
    if last[0] is treedef:
        return last[1]
    found = walk(treedef)
    _last_walk = (treedef, found)
    return found


# Exact types whose `==` between two objects of that very type holds exactly for the same
# value (`_keys/_scalars.py`); `bool` is its own type, so `1` and `True` differ.
# By identity (`type_ids`), as `_NO_IDENTITY`: a user's metaclass may call its class `int`.
_EXACT = type_ids((int, str, bytes, bool, type(None)))
_bits = struct.Struct("<d").pack

# Values whose identity means nothing: Python may or may not make equal ones one object.
_NO_IDENTITY = type_ids((int, float, complex, str, bytes, bool, type(None), type(Ellipsis)))
# Past this many objects the pattern is not worked out: the key then equals no other.
_ALIAS_BUDGET = 10_000


def _aliases(statics: list, data: list) -> tuple:
    """Which of a call's static objects (its static leaves, and what its node data holds,
    through tuples and lists) are the very object met earlier, as `(place, earlier place)`.

    A trace can tell (`a is b`), and equivalent objects have equal keys: `f(g, g)` and
    `f(g1, g2)` with `g1`, `g2` rebuilt lambdas must not share a program (nor an output that
    returns one of them)."""
    first: dict[int, int] = {}
    repeats: list[tuple[int, int]] = []
    if flat_module_aux is not None:  # Equinox < 0.13.3: see `_compat.py`.
        data = list(map(flat_module_aux, data))
    pending = [*reversed(data), *reversed(statics)]
    held = []  # The objects met, so that no `id` is reused while this runs.
    while pending:
        x = pending.pop()
        if id(type(x)) in _NO_IDENTITY:
            continue
        place = len(held)
        if place >= _ALIAS_BUDGET:
            return (object(),)
        seen = first.setdefault(id(x), place)
        held.append(x)
        if seen != place:
            repeats.append((place, seen))
        elif type(x) is tuple or type(x) is list:
            pending.extend(reversed(x))
    return tuple(repeats)


def _changed(old: Any, new: Any) -> tuple[int | None, Any, Any]:
    """Which static (its index among the statics, or `None` for node data) has another key."""
    old_statics, old_nodes, old_classes = old[2:5]
    new_statics, new_nodes, new_classes = new[2:5]
    for i, (a, b) in enumerate(zip(old_statics, new_statics)):
        if a != b:
            return i, a, b
    if old_nodes == new_nodes:
        return None, old_classes, new_classes
    return None, old_nodes, new_nodes
