"""The objects whose walk ran out of the object budget lately (`K-too-deep`), so that the next
calls give them their key equal to nothing at once rather than walking 50,000 objects again
(with restarts: half a second a call) only to find the same. Such a key is never a wrong answer
whatever the object is now: it matches nothing and every call traces, its program reused by its
jaxpr. Skipping the walk only defers the day an object that shrank back under the budget gets a
key that can hit: it is walked again after `FIRST_SKIP` meetings, then after twice as many each
time it runs out again, up to `MAX_SKIP` (the walk's cost spread over that many meetings; a
jitted call that misses meets its static arguments three times: its lookup, the miss's
explanation, the key after the trace).
"""

import weakref
from typing import Any

from ._frozen import _items
from ._per_class import type_ids


FIRST_SKIP = 48
MAX_SKIP = 3072
# The latest `MEMO_SIZE` objects, by `(id, by_value, content_ok)`: a weak reference to each, or
# where it takes none (a tuple, a dict) its type and length, never the object (a past-budget
# object may be huge, and the memo must keep nothing alive); the meetings left to skip, the
# next skip, and what the walk ran out in (the miss's reason). Another object that took a dead
# one's `id` and passes that check skips its walk too: a missed hit for a while, no more.
MEMO_SIZE = 16
CONTAINERS = type_ids((tuple, frozenset, list, dict, set))
_memo: dict[tuple[int, bool, bool], list] = {}


def _mark(obj: Any) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:
        # No user code: the length of a builtin container alone.
        return (type(obj), len(obj) if id(type(obj)) in CONTAINERS else None)


def _same(mark: Any, obj: Any) -> bool:
    if type(mark) is weakref.ref:
        return mark() is obj
    return mark == _mark(obj)


def reaching(path: list) -> str:
    """What a walk that ran out of the budget was in, for the jit layer's miss: the biggest
    container on the path to where it ran out ("a list of 55,000 items (Record)"), else ""."""
    sizes = [(len(x), i) for i, x in enumerate(path) if id(type(x)) in CONTAINERS]
    if not sizes:
        return ""
    x = path[max(sizes)[1]]
    items = _items(x) if type(x) is dict else x
    names = sorted({t.__qualname__ for t in set(map(type, items))})
    kinds = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"a {type(x).__name__} of {len(x):,} items ({kinds})"


def skip(obj: Any, by_value: bool, content_ok: bool) -> str | None:
    """What `obj`'s last walk ran out in (`reaching`), where it ran out lately and is
    still to be skipped this time; else `None` (walk it)."""
    entry = _memo.get((id(obj), by_value, content_ok))
    if entry is None:
        return None
    mark, left, _, what = entry
    if left <= 0 or not _same(mark, obj):
        return None
    entry[1] = left - 1
    return what


def ran_out(obj: Any, by_value: bool, content_ok: bool, reaching: str) -> None:
    """`obj`'s walk ran out of the budget: skip its next meetings, twice as many as last time."""
    slot = (id(obj), by_value, content_ok)
    old = _memo.pop(slot, None)
    n = old[2] if old is not None and _same(old[0], obj) else FIRST_SKIP
    _memo[slot] = [_mark(obj), n, min(2 * n, MAX_SKIP), reaching]
    while len(_memo) > MEMO_SIZE:
        try:
            _memo.pop(next(iter(_memo)), None)
        except (RuntimeError, StopIteration):  # Changed by another thread meanwhile.
            break


def walked(obj: Any, by_value: bool, content_ok: bool) -> None:
    """`obj` was keyed within the budget: forgotten."""
    if _memo:
        _memo.pop((id(obj), by_value, content_ok), None)


def clear() -> None:
    _memo.clear()
