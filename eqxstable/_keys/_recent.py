"""The keys of the node data of the latest call, while their watches hold.

A miss keys the same node data more than once: on lookup (`_jit/_cache.py`), and again to
explain the miss (`_jit/_signature.py` keys each node's data on its own). An Equinox module's
node data is a tuple made afresh by every flatten, holding the module's static fields (a
closure-converted function's jaxpr and its output structure, a solver, a list of options): the
memo across calls (`_memo.py`) holds objects weakly by `id`, and a fresh tuple takes no weak
reference, so each was walked whole every time (optimistix's least-squares JVP tests under the
swap, issue 19).

An entry is found by the `id`s of the items of an exact tuple, and used only for an exact tuple
holding the very same items (by `is`) while the watch computed with its key holds: the key of an
exact tuple is its items' keys, every object those keys read is then as it was, and a walk now
would give the same key. The entry holds the items, so no other object takes their `id`s while
it lives, and the watch weakly where it compares an array's bytes (`K-array-reached`: the copy
goes with the wrapper that checks it, as in the memo). It holds the node data of one call: the
jit cache starts afresh at each lookup (`new_call`), as it keeps the structure it walked last
(`_cache._last_walk`); at most `_SIZE` entries, and `eqxstable.clear_caches()` empties it.
"""

import operator
from collections import OrderedDict
from typing import Any

from ._types import Key
from ._watch import Watch


_SIZE = 256
# Node data with more items than this (a long tuple of names) is keyed afresh each time: its
# slot would cost what a walk of those scalars costs.
_MAX_ITEMS = 64
_TUPLE = tuple


class Recent:
    """The keys of node data (exact tuples) by their items, with their watches."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple, tuple[tuple, Key, Watch]] = OrderedDict()

    def recall(self, data: Any) -> tuple[Key, Watch] | None:
        """The key and watch of node data holding these very items, computed earlier, while
        its watch holds; else `None`."""
        if type(data) is not _TUPLE or len(data) > _MAX_ITEMS:
            return None
        slot = tuple(map(id, data))
        entry = self._entries.get(slot)
        if entry is None:
            return None
        held, key, watch = entry
        if not all(map(operator.is_, held, data)):
            return None
        if watch.blobs:
            # Held weakly (`remember`): valid while what it compares lives and is unchanged.
            strong = watch.strong() if watch.weak_valid() else None
            if strong is None:
                return None
            watch = strong
        elif not watch.valid():
            return None
        self._entries.move_to_end(slot)
        return key, watch

    def remember(self, data: Any, key: Key, watch: Watch) -> None:
        if type(data) is not _TUPLE or len(data) > _MAX_ITEMS:
            return
        slot = tuple(map(id, data))
        # The items, never the caller's tuple (an exact tuple: the same items).
        self._entries[slot] = (_TUPLE(data), key, watch.weak() if watch.blobs else watch)
        self._entries.move_to_end(slot)
        while len(self._entries) > _SIZE:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
