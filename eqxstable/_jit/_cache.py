"""The cache entries of one jitted program, and the per-call lookup (the hit path).

An `Entry` stands for one set of static parts of a call: the pytree structure (with its node data
compared type-exactly), which leaves are arrays, and the static leaves compared by `stable_key`.
It is passed to `jax.jit` as the one static argument, so it hashes by identity (C-fast) and JAX's
own C++ cache handles what varies under it (shapes, dtypes, weak types, shardings).

The hit path costs one flatten, a type tuple, a few identity comparisons, and the entry's
`Watch`: a flat list of identity checks over everything the statics' keys depend on (closure
cells, the globals a function reads, a captured list's items). When one fails, the keys are
computed again: an equal key is still a hit (a global rebound to an equal value), another key
finds or makes another entry. A program is never reused unless every key it was made for holds.
"""

import itertools
import operator
import struct
from typing import Any

import equinox as eqx
import jax.tree_util as jtu

from .._compat import flat_module_aux
from .._keys import compute, compute_node_data, merge, Watch
from .._keys._structure import same_structure, Structure, walk
from ._config import untraced
from ._lru import LRU, sizes
from ._pinned import fun_identity, pin_slot, same_fun


_is = operator.is_
_compress = itertools.compress
_chain = itertools.chain.from_iterable
# JAX never mutates its arguments, so calls without donated (or kept) leaves can share this.
_NOTHING: list = []
# Keep the most recent entries at hand for the identity fast path; older ones are found by key.
_RECENT = 8
# Up to this many statics (or one leaf in eight) are deleted from the flattened list in place.
_FEW_STATICS = 8


def node_data(treedef: Any, leaves: list) -> list:
    """The node data of every node of `treedef` that has some (static fields of Equinox modules,
    dict keys, ...). `PyTreeDef.__eq__` compares node data with `==`, which lets `1`, `1.0` and
    `True` collide; the cache compares them by identity, else by `stable_key`."""
    data: list = []
    append = data.append
    treedef.walk(lambda _, d: None if d is None else append(d), type, leaves)
    if flat_module_aux is not None:  # Equinox < 0.13.3: see `_compat.py`.
        return list(map(flat_module_aux, data))
    return data


def _same_node_data(new: list, old: tuple) -> bool:
    # Node data is a fresh tuple (or list) per flatten, but the values in it are the same objects
    # call after call (an Equinox module's static fields), so identity one level down suffices.
    if len(new) != len(old):
        return False
    for a, b in zip(new, old):
        if a is not b and not (
            type(a) in (tuple, list)
            and type(b) is type(a)
            and len(a) == len(b)
            and all(map(_is, a, b))
        ):
            return False
    return True


def _needs_data_check(data: list) -> bool:
    # Strings are only ever `==` to strings, so node data made of lists of strings alone (the
    # keys of a `kwargs` dict) needs no further check once the treedefs compare equal.
    return not all(type(d) is list and all(type(k) is str for k in d) for d in data)


class Entry:
    """One cache entry; JAX sees it as the static argument of the jitted body."""

    __slots__ = (
        "treedef",
        "types",
        "static_sel",
        "static_of",
        "dyn_sel",
        "donate_sel",
        "keep_sel",
        "statics",
        "data",
        "data_items",
        "check_data",
        "watch",
        "watched",
        "template",
        "donate_pos",
        "keep_pos",
        "key",
        "mutated",
        "all_kept",
        "drop_pos",
        "jaxprs",
        "token",
        "compiled",
        "fun",
        "slot",
        "config",
        "__weakref__",
    )

    def __init__(self, key, treedef, leaves, mask, data, watch: Watch, donated_args: str):
        self.key = key
        # The configuration JAX reads while tracing but leaves out of its own key
        # (`_config.py`): a call under other values is another entry, with its own token.
        self.config = key[-1]
        # `(leaf index or None, old key, new key)` when this entry was made because a static
        # changed in place: its first trace is then a miss of kind "mutated".
        self.mutated: tuple[int | None, Any, Any] | None = None
        self.treedef = treedef
        self.static_sel = tuple(not m for m in mask)
        self.static_of = _getter([i for i, m in enumerate(mask) if not m])
        self.dyn_sel = mask
        self.statics: tuple = ()
        # What `jax.jit` sees as the static argument (`_reuse.Token`): `None` until the first
        # call, which traces and then compiles, or reuses a program compiled for an equal trace.
        self.token: Any = None
        # Verify mode: the jaxpr each program of this entry was compiled from, by argument types.
        self.jaxprs: dict | None = None
        # How many programs JAX compiled for this entry (one per miss): its weight in the LRU.
        self.compiled = 0
        # Pinned (`_pinned.py`): the function that traced it (`fun_identity`), else `None`.
        self.fun: tuple | None = None
        # Its key in `Cache.entries`: `key`, or `pin_slot(...)` once pinned.
        self.slot: Any = key
        self.adopt(treedef, leaves, data, watch)
        # Which dynamic leaves are donated: all, none, or all but those of `args[0]`.
        n_first = leaves_of_first_arg(treedef)
        if donated_args == "none":
            donated = [False] * len(leaves)
        elif donated_args == "all":
            donated = list(mask)
        else:
            donated = [m and i >= n_first for i, m in enumerate(mask)]
        self.donate_sel = tuple(donated)
        self.keep_sel = tuple(m and not d for m, d in zip(mask, donated))
        self.donate_pos = [i for i, d in enumerate(self.donate_sel) if d]
        self.keep_pos = [i for i, k in enumerate(self.keep_sel) if k]
        # Every leaf an array and nothing donated: the flattened list is passed on as it is.
        self.all_kept = all(self.keep_sel)
        # Nothing donated and only a few statics among many arrays (a model's activation
        # functions): the hit path deletes the statics from the flattened list, last first, which
        # costs a few `memmove`s instead of a new list built leaf by leaf.
        n_static = len(leaves) - sum(mask)
        few = not self.donate_pos and 0 < n_static <= max(_FEW_STATICS, len(leaves) // 8)
        self.drop_pos = [i for i, m in reversed(list(enumerate(mask))) if not m] if few else None

    def adopt(self, treedef: Any, leaves: list, data: list, watch: Watch) -> None:
        """Holds these (equivalent) static objects and this structure (whose node data may hold
        a rebuilt module's static lambda) from now on: the identity fast path compares against
        them, and a retrace rebuilds the call from them, never from older ones."""
        self.treedef = treedef
        self.types = tuple(map(type, leaves))
        self.statics = tuple(_compress(leaves, self.static_sel))
        self.template = [leaf if s else None for s, leaf in zip(self.static_sel, leaves)]
        self.data = tuple(data)
        # Node data that is all tuples and lists (Equinox modules, dicts) is compared in one
        # C-level pass over its items.
        self.data_items = (
            tuple(itertools.chain.from_iterable(data))
            if all(type(d) in (tuple, list) for d in data)
            else None
        )
        self.check_data = _needs_data_check(data)
        self.watch = watch
        # Most entries watch nothing (their statics are library functions and constants).
        self.watched = bool(watch)

    def same_node_data(self, treedef: Any, leaves: list) -> bool:
        """Whether the node data of `treedef` (which compares equal to this entry's) holds the
        very same objects as this entry's node data, one level down."""
        data = node_data(treedef, leaves)
        items = self.data_items
        if items is None:
            return _same_node_data(data, self.data)
        try:
            new = tuple(_chain(data))
        except TypeError:
            return False
        return len(new) == len(items) and all(map(_is, new, items))

    def take(self, leaves: list) -> tuple[list, list]:
        """`split` for the hit path, which owns `leaves` (fresh from a flatten) and may reuse it
        as the kept list."""
        drop = self.drop_pos
        if drop is None:
            return self.split(leaves)
        for i in drop:
            del leaves[i]
        return _NOTHING, leaves

    def split(self, leaves: list) -> tuple[list, list]:
        """The (donated, kept) dynamic leaves of a call that matched this entry."""
        if self.all_kept:
            return _NOTHING, leaves
        if not self.donate_pos:
            return _NOTHING, list(_compress(leaves, self.keep_sel))
        if not self.keep_pos:
            return list(_compress(leaves, self.donate_sel)), _NOTHING
        return list(_compress(leaves, self.donate_sel)), list(_compress(leaves, self.keep_sel))

    def rebuild(self, donated: list, kept: list) -> tuple[tuple, dict]:
        """`(args, kwargs)` inside the trace: the dynamic leaves put back among the statics."""
        leaves = list(self.template)
        for i, x in zip(self.donate_pos, donated):
            leaves[i] = x
        for i, x in zip(self.keep_pos, kept):
            leaves[i] = x
        return jtu.tree_unflatten(self.treedef, leaves)


def _getter(indices: list[int]) -> Any:
    """`leaves -> tuple of leaves[i] for i in indices`, in C (`operator.itemgetter`), which is
    much cheaper than `itertools.compress` over every leaf when few leaves are static."""
    if not indices:
        return lambda leaves: ()
    if len(indices) == 1:
        (i,) = indices
        return lambda leaves: (leaves[i],)
    return operator.itemgetter(*indices)


def leaves_of_first_arg(treedef: Any) -> int:
    args_def = treedef.children()[0]
    if args_def.num_nodes == 1 or not args_def.children():
        return 0
    return args_def.children()[0].num_leaves


class Cache:
    """The entries of one jitted program."""

    def __init__(self, donated_args: str, on_evict: Any = None):
        self.donated_args = donated_args
        # Bounded by the number of compiled programs the entries stand for (`CacheInfo.maxsize`);
        # the keys an entry is also found under after a trace changed its statics (`rekey`) are
        # kept apart, so that an entry weighs once.
        self.entries: LRU[Any, Entry] = LRU(_entries_bound, self._evicted, _weight)
        # Each alias holds the very objects that were traced: `(entry, statics, node data)`.
        self.aliases: LRU[Any, tuple[Entry, tuple, tuple]] = LRU(_entries_bound)
        self.recent: list[Entry] = []
        self._on_evict = on_evict

    def _evicted(self, key: Any, entry: Entry) -> None:
        # An evicted entry is no longer served: its statics are found again by key (and traced
        # again) if they come back. JAX drops its programs from its own LRU in time.
        del key
        self.recent = [e for e in self.recent if e is not entry]
        for alias, (e, _, _) in self.aliases.items():
            if e is entry:
                self.aliases.pop(alias)
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

    def clear(self) -> None:
        self.entries.clear()
        self.aliases.clear()
        self.recent = []

    def pin(self, entry: Entry, parts: Any) -> None:
        """After a trace of `entry` whose program calls Python while it runs (`_pinned.py`): it
        serves only the very objects it traced, those of `entry` and the function `parts`."""
        if entry.fun is not None:
            return
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
        if entry is None:
            alias = self.aliases.get(key)
            if alias is not None and _traced_these(alias, leaves, data):
                entry = alias[0]
        if entry is None and parts is not None:
            entry = self.entries.get(pin_slot(key, statics, data, fun_identity(parts)))
        if entry is not None and entry.fun is not None:
            # Pinned: only its very objects (an alias may lead to one), and only while nothing
            # its key reads was rebound since its trace.
            if not (
                same_fun(entry.fun, parts)
                and _traced_these((entry, entry.statics, entry.data), leaves, data)
            ):
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
        self.entries.set(key, entry)
        return entry, True

    def rekey(self, entry: Entry) -> None:
        """After a trace: what the function changed while traced (a `nonlocal` trace counter, a
        list it appends to) is part of the program, not a later change, so the entry is also
        found under the keys its statics have now."""
        key, watch = _key(entry.treedef, entry.dyn_sel, list(entry.statics), entry.config)
        if key != entry.key and self.entries.peek(key) is None:
            # Only for these very objects: an equivalent object rebuilt over the same shared
            # state (a list the trace appends to) has this key too, but it never ran the trace.
            self.aliases.set(key, (entry, entry.statics, entry.data))
        entry.watch = watch
        entry.watched = bool(watch)


def _traced_these(alias: tuple, leaves: list, data: list) -> bool:
    """Whether a call's statics and node data are the very objects an aliased entry traced."""
    entry, statics, traced_data = alias
    return all(map(_is, entry.static_of(leaves), statics)) and _same_node_data(data, traced_data)


def _entries_bound() -> int:
    return sizes.entries


def _weight(entry: Entry) -> int:
    return max(1, entry.compiled)


def _key(treedef: Any, mask: tuple, statics: list, config: Any) -> tuple[Any, Watch]:
    """The cache key of a call: its structure, which leaves are arrays, the static leaves' keys,
    the node data's keys, the keys of the user's classes among the node types (a module's
    methods run in the trace, and may read globals or class attributes), and the configuration
    JAX reads while tracing but leaves out of its own key (`_config.untraced`), last."""
    keys, watches = [], []
    for x in statics:
        t = type(x)
        if t in _EXACT:
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
    classes, data, shape = walk(treedef)
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
        config,
    )
    return key, merge(watches)


# Exact types whose `==` between two objects of that very type holds exactly for the same
# value (`_keys/_scalars.py`); `bool` is its own type, so `1` and `True` differ.
_EXACT = frozenset({int, str, bytes, bool, type(None)})
_bits = struct.Struct("<d").pack

# Values whose identity means nothing: Python may or may not make equal ones one object.
_NO_IDENTITY = frozenset({int, float, complex, str, bytes, bool, type(None), type(Ellipsis)})
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
        if type(x) in _NO_IDENTITY:
            continue
        place = len(held)
        if place >= _ALIAS_BUDGET:
            return (object(),)
        seen = first.setdefault(id(x), place)
        held.append(x)
        if seen != place:
            repeats.append((place, seen))
        elif type(x) in (tuple, list):
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


# For the aliases of `_program.py`: the same comparison of node data, one level down.
same_node_data = _same_node_data
