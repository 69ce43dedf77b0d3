"""The scans that decide, before a walk, that it would run out of the object budget (`K-too-deep`):
a list, dict, set or tuple holding more distinct containers (`past_budget`) or plain objects
(`run_out`) than the budget has left. They give the answer the walk would give, without the walk
(a function closing over 55,000 plain records: 17 s a keying, now milliseconds).

The budget itself (`MAX_OBJECTS`), the walk that counts it and the restarts past it (`top`) are
`_context.py`'s; the containers keyed by identity past it are `_frozen.py`'s.
"""

from typing import Any

from ._context import (
    _CLASS_HANDLERS,
    _CONTAINERS,
    _handler,
    _RETRIES,
    budget_left,
    Ctx,
    HANDLERS,
    held_items,
    MAX_DEPTH,
    TOO_MANY,
)
from ._frozen import _items, frozen_items, frozen_nested, MEMO_MIN, recall_held
from ._numbering import TooMany
from ._types import Identity


def big_container(obj: Any, ctx: Ctx) -> Any:
    """`K-too-deep` decided before the walk, for an exact list, dict or set (not node data): the
    key `held_items` gave it, while it holds the very items it held then (`recall_held`: a
    rebuilt reader of an unchanged global vocabulary walks none of it); else, where it holds
    more distinct containers than the budget has left and `held_items` may key it, that key
    (walking it would run out of the budget, and `top` would start over to key it so). Else
    `None`: it is walked."""
    memo = recall_held(obj) if len(obj) >= MEMO_MIN else None
    if memo is not None:
        state_fn, state, held = memo
        ctx.identity = True
        ctx.states.append((obj, state_fn, state))
        return (TOO_MANY, Identity(obj), held)
    items = _items(obj) if type(obj) is dict else obj
    if not past_budget(items, ctx):
        return run_out(items, ctx)
    if frozen_items(obj):
        return held_items(obj, ctx, True)
    if frozen_nested(obj):
        return held_items(obj, ctx, False)
    return run_out(items, ctx)


def run_out(items: Any, ctx: Ctx) -> None:
    """Raises `TooMany` at once where `items` holds more distinct objects, each walked as one
    and never keyed by identity past the budget (a plain object: `K-mutable`), than the budget
    has left, with room for every restart of `top`: their walk would run out whatever `top`
    keys by identity, so a function closing over 55,000 plain objects gets the key equal to
    nothing after a scan of them, not a walk of 50,000 (17 s a key, at every call). Exact: it
    raises only where the walk would run out at every start; else returns `None`."""
    walk = ctx.stack
    left = budget_left(ctx) + _RETRIES
    if len(items) <= left or (not walk.linear and ctx.depth >= MAX_DEPTH):
        # (Walked again without numbers, what sits at `MAX_DEPTH` is `too_deep`, not counted.)
        return None
    types = set(map(type, items))
    counted = {t for t in types if id(t) not in _CONTAINERS and _counted(t)}
    if not counted:
        return None
    # Most hold objects of one kind only (scanned in C): no loop in Python.
    ids = set(map(id, items)) if counted == types else {id(x) for x in items if type(x) in counted}
    if len(ids) <= left:
        return None
    # Less those this walk met already (being walked, keyed, numbered or cut): met again, they
    # walk nothing. A slot is an `id` and one bit.
    met = {*walk, *walk.frozen}
    for slots in (ctx.memo, walk.done, walk.cuts):
        met.update(map(_unslot, slots))
    fresh = len(ids) - len(ids & met) if met else len(ids)
    if fresh > left:
        raise TooMany()
    return None


def _unslot(slot: int) -> int:
    return slot >> 1


def _counted(t: type) -> bool:
    """Whether every object of type `t` is walked by a `compound` handler: one object of the
    budget each, met for the first time."""
    handler = HANDLERS.get(id(t))
    if handler is None:
        handler = _CLASS_HANDLERS.get(id(t)) or _handler(t)
    return getattr(handler, "counted", False)


def past_budget(items: Any, ctx: Ctx) -> bool:
    """Whether `items` holds more distinct containers (each walked as one object) than the
    budget has left: a walk of them would run out of it."""
    left = budget_left(ctx)
    if len(items) <= left or _CONTAINERS.isdisjoint(map(id, map(type, items))):
        return False
    return len({id(x) for x in items if id(type(x)) in _CONTAINERS}) > left
