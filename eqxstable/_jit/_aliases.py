"""The key a trace left its objects with, kept for those very objects only until they are seen
keyed otherwise.

A function or static object that changes itself while traced (a trace counter, a list it appends
to) has another key after the trace. The program (`_sharing.py`) or entry (`_cache.py`) also
stands for that key, for the very objects that traced it, so that the next call, which passes them
in the state the trace left, is a hit, as under `equinox.filter_jit`. An alias stands for the
state a trace left, never for a state the user writes: once a lookup keys the same objects
otherwise (the user changed them: a miss of kind `"mutated"`), or a later trace leaves them in
another state, the state has left the aliased one and the alias goes. A user who then writes
that state back is traced again, as a fresh trace from that state would compute (the program was
traced from another state: `x * len(log)`, attack 8b-08). So a set of objects has at most one
alias.
"""

import operator
from collections.abc import Callable
from typing import Any

from ._lru import LRU
from ._node_data import same_node_data


_is = operator.is_


def _ids(objects: Any, data: Any) -> tuple:
    # Node data one level down, as it is compared (`same_node_data`): a fresh tuple per flatten.
    return (
        tuple(map(id, objects)),
        tuple(tuple(map(id, d)) if type(d) in (tuple, list) else id(d) for d in data),
    )


def _same(found: tuple, objects: Any, data: Any) -> bool:
    _, held, held_data, _ = found
    return (
        len(held) == len(objects)
        and all(map(_is, held, objects))
        and same_node_data(list(data), held_data)
    )


class Aliases:
    """`key -> target` for the very objects (and node data) that a trace left with `key`."""

    __slots__ = ("_by_key", "_by_ids", "_on_drop")

    def __init__(self, bound: Callable[[], int], on_drop: Callable[[Any], None] | None = None):
        # `key -> (target, objects, node data, their ids)`; the objects are held, so that no
        # other object can have their `id`s while the alias lives.
        self._by_key: LRU[Any, tuple[Any, tuple, tuple, tuple]] = LRU(bound, self._evicted)
        # The ids of each aliased set of objects -> its one key.
        self._by_ids: dict[tuple, Any] = {}
        # Told of the target of an alias dropped because its objects left the aliased state.
        self._on_drop = on_drop

    def _evicted(self, key: Any, found: tuple) -> None:
        if self._by_ids.get(found[3]) is key:
            # `pop`, not `del`: another thread may have dropped it meanwhile.
            self._by_ids.pop(found[3], None)

    def get(self, key: Any, objects: Any, data: Any) -> Any:
        """The target aliased under `key` if `objects` and `data` are the very ones that traced
        it, else `None`."""
        found = self._by_key.get(key)
        if found is None or not _same(found, objects, data):
            return None
        return found[0]

    def set(self, key: Any, target: Any, objects: tuple, data: tuple) -> None:
        """After a trace left `objects` (and `data`) with `key`: the alias they had goes."""
        self.left(key, objects, data)
        ids = _ids(objects, data)
        self._by_key.set(key, (target, tuple(objects), tuple(data), ids))
        self._by_ids[ids] = key

    def left(self, key: Any, objects: Any, data: Any) -> None:
        """`objects` (and `data`) are keyed `key` now, found by key or traced: an alias they have
        under another key stands for a state they left, and goes. Cheap when there is none."""
        if not self._by_ids:
            return
        ids = _ids(objects, data)
        old = self._by_ids.get(ids)
        if old is None:
            return
        found = self._by_key.peek(old)
        if found is None or not _same(found, objects, data):
            return
        if old is key or old == key:
            return
        self._by_key.pop(old)
        self._by_ids.pop(ids, None)
        if self._on_drop is not None:
            self._on_drop(found[0])

    def drop_target(self, target: Any) -> None:
        """`target` is gone (an evicted entry, a dropped program): so are its aliases."""
        for key, found in self._by_key.items():
            if found[0] is target:
                self._by_key.pop(key)
                self._evicted(key, found)

    def clear(self) -> None:
        self._by_key.clear()
        self._by_ids.clear()

    def __len__(self) -> int:
        return len(self._by_key)
