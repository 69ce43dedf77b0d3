"""The machinery of one key computation: its context, the recursion with cycles and depth limits,
identity fallbacks, and the memo that makes the key of an already-seen object cheap.

The handlers, and the table that picks one per type, live in `_values.py`, `_callables.py` and
`_rules.py`; this module's `key` reaches them through `_rules.resolve`, imported on first use.
"""

import weakref
from collections.abc import Callable
from typing import Any

from ._types import Identity, Key
from ._watch import Watch


# Deeper than this, an object gets a key equal to nothing: a 500-deep tuple must not exhaust the
# stack, neither when its key is computed nor when two keys are compared (C recursion, 2 to 4
# levels per level of the object, shares the limit with the Python frames below it).
MAX_DEPTH = 100


class Ctx:
    """Per-call state of a key computation."""

    __slots__ = (
        "stack",
        "depth",
        "states",
        "names",
        "blobs",
        "identity",
        "copied_arrays",
        "by_value",
        "own_eq",
    )

    def __init__(self, by_value: bool = False) -> None:
        # Lists, dicts and sets made afresh by each flatten (pytree node data) are keyed by their
        # contents alone: a new one per call is not a new key.
        self.by_value = by_value
        # id -> depth of the compound objects being keyed, so cycles become back-references.
        self.stack: dict[int, int] = {}
        self.depth = 0
        # What must stay unchanged for the key to stay valid (see `Watch`).
        self.states: list = []
        self.names: list = []
        self.blobs: list = []
        # Whether some part of the key is the identity of a changeable object.
        self.identity = False
        # Whether a NumPy array was keyed by contents where `intern` hands out a read-only copy.
        self.copied_arrays = False
        # Whether some part is compared by an object's own `==` (`Equal`): shared by `==`, yet
        # never substituted by `intern`.
        self.own_eq = False

    def watch(self) -> Watch:
        return Watch(tuple(self.states), tuple(self.names), tuple(self.blobs))

    def extend(self, watch: Watch) -> None:
        self.states.extend(watch.states)
        self.names.extend(watch.names)
        self.blobs.extend(watch.blobs)


Handler = Callable[[Any, Ctx, bool], Any]
HANDLERS: dict[type, Handler] = {}


def key(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """The key parts of `obj`. `content_ok`: whether a NumPy array met here may be keyed by its
    contents alone (only through containers that `intern` rebuilds with read-only copies)."""
    t = type(obj)
    handler = HANDLERS.get(t)
    if handler is None:
        handler = HANDLERS[t] = _rules_resolve(t)
    return handler(obj, ctx, content_ok)


def _rules_resolve(t: type) -> Handler:
    from . import _rules

    return _rules.resolve(t)


def compound(fn: Handler) -> Handler:
    """Wraps the handler of an object that contains others: a cycle becomes a relative
    back-reference (so a sub-key means the same wherever it is embedded); too deep a nesting, or
    parts that cannot be read (an attribute that raises), fall back to identity."""

    def handler(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
        i = id(obj)
        depth = ctx.stack.get(i)
        if depth is not None:
            return ("cycle", ctx.depth - depth)
        if ctx.depth >= MAX_DEPTH:
            return too_deep(obj, ctx)
        ctx.stack[i] = ctx.depth
        ctx.depth += 1
        try:
            return fn(obj, ctx, content_ok)
        except RecursionError:
            return too_deep(obj, ctx)
        except Exception:
            return identity(obj, ctx)
        finally:
            ctx.depth -= 1
            del ctx.stack[i]

    handler.__name__ = fn.__name__
    handler.__qualname__ = fn.__qualname__
    return handler


def _never(obj: Any) -> tuple:
    return ()


def too_deep(obj: Any, ctx: Ctx) -> Any:
    """Nested too deeply to key or watch: a key equal to nothing, not even this object's next
    key, so every call recompiles. Never a wrong answer, never a crash."""
    ctx.identity = True
    ctx.states.append((obj, _never, (None,)))
    return ("too-deep", Identity(_Unkeyable()))


class _Unkeyable:
    __slots__ = ("__weakref__",)


def identity(obj: Any, ctx: Ctx) -> Identity:
    """This very object: the safe fallback, equal to nothing else."""
    ctx.identity = True
    return Identity(obj)


#
# The memo: the key of an object seen before is cheap while its watch is valid.
#


class MemoEntry:
    __slots__ = ("ref", "key", "watch")

    def __init__(self, ref: weakref.ref, key: Key, watch: Watch):
        self.ref = ref
        self.key = key
        self.watch = watch


memo: dict[int, MemoEntry] = {}


def _forget(i: int, ref: weakref.ref, memo: dict[int, MemoEntry] = memo) -> None:
    # `memo` is bound as a default: at interpreter exit, module globals may already be gone.
    entry = memo.get(i)
    if entry is not None and entry.ref is ref:
        del memo[i]


def remember(obj: Any, key: Key, watch: Watch) -> None:
    i = id(obj)
    try:
        ref = weakref.ref(obj, lambda r, i=i, forget=_forget: forget(i, r))
    except TypeError:
        return
    memo[i] = MemoEntry(ref, key, watch.weak())


def recall(obj: Any) -> MemoEntry | None:
    """The memoised key of `obj` if it is still valid."""
    entry = memo.get(id(obj))
    if entry is not None and entry.ref() is obj and entry.watch.weak_valid():
        return entry
    return None
