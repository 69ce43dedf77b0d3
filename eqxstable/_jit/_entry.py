"""`Entry`: one set of static parts of a call, and how a call that matched it is split.

An `Entry` stands for the pytree structure (with its node data compared type-exactly), which
leaves are arrays, and the static leaves compared by `stable_key`. It is passed to `jax.jit` as
the one static argument, so it hashes by identity (C-fast) and JAX's own C++ cache handles what
varies under it (shapes, dtypes, weak types, shardings). `Cache` (`_cache.py`) finds the entry
of a call.
"""

import itertools
import operator
from typing import Any

import jax.tree_util as jtu

from .._keys import Watch
from ._node_data import needs_data_check, node_data, same_node_data


_is = operator.is_
_compress = itertools.compress
_chain = itertools.chain.from_iterable
# JAX never mutates its arguments, so calls without donated (or kept) leaves can share this.
_NOTHING: list = []
# Up to this many statics (or one leaf in eight) are deleted from the flattened list in place.
_FEW_STATICS = 8


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
        "unpinned",
        "all_kept",
        "drop_pos",
        "jaxprs",
        "token",
        "compiled",
        "fun",
        "slot",
        "config",
        "remap",
        "pinned_by",
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
        # `(where, old, new)` when this entry was made for objects equivalent to a pinned
        # entry's (`_pinned.py`), which serves only its own: its first trace is then a miss of
        # kind "identity" naming them (`_pinned.pinned_twin`). `where` is the leaf's index,
        # `("field", the new object)` for a module's static field, or `None` for the function.
        self.unpinned: tuple[Any, str, str] | None = None
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
        # A guest whose trace made output objects (`_outputs.py`): `(the template of the
        # program it runs, its own trace's)`, so that its calls get its own objects.
        self.remap: tuple | None = None
        # Why it is pinned: its program calls Python (`"callback"`), or its output holds objects
        # its trace made (`"output"`): what the miss of an equivalent object says.
        self.pinned_by = "callback"
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
            if all(type(d) is tuple or type(d) is list for d in data)
            else None
        )
        self.check_data = needs_data_check(data)
        self.watch = watch
        # Most entries watch nothing (their statics are library functions and constants).
        self.watched = bool(watch)

    def same_node_data(self, treedef: Any, leaves: list) -> bool:
        """Whether the node data of `treedef` (which compares equal to this entry's) holds the
        very same objects as this entry's node data, one level down."""
        data = node_data(treedef, leaves)
        items = self.data_items
        if items is None:
            return same_node_data(data, self.data)
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
