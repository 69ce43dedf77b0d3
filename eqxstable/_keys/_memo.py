"""The memo across calls: the key of an object seen before is cheap while its watch is valid."""

import weakref
from typing import Any

from ._types import Key
from ._watch import Watch


class MemoEntry:
    __slots__ = ("ref", "key", "watch", "spliced")

    def __init__(self, ref: weakref.ref, key: Key, watch: Watch, spliced: bool):
        self.ref = ref
        self.key = key
        self.watch = watch
        # Whether its parts may be spliced into another key: not when they number objects
        # (`_DEF`, `_SEEN`, `_CUT`), whose numbers are those of its own walk.
        self.spliced = spliced


memo: dict[int, MemoEntry] = {}


def _forget(i: int, ref: weakref.ref, memo: dict[int, MemoEntry] = memo) -> None:
    # `memo` is bound as a default: at interpreter exit, module globals may already be gone.
    entry = memo.get(i)
    if entry is not None and entry.ref is ref:
        del memo[i]


def remember(obj: Any, key: Key, watch: Watch, spliced: bool = True) -> None:
    i = id(obj)
    try:
        ref = weakref.ref(obj, lambda r, i=i, forget=_forget: forget(i, r))
    except TypeError:
        return
    memo[i] = MemoEntry(ref, key, watch.weak(), spliced)


def recall(obj: Any) -> MemoEntry | None:
    """The memoised key of `obj` if it is still valid."""
    entry = memo.get(id(obj))
    if entry is not None and entry.ref() is obj and entry.watch.weak_valid():
        return entry
    return None
