"""The machinery of one key computation: its context, the dispatch of an object to its handler,
the recursion with cycles and depth limits (cuts walked from the top), and the budget of objects
one key may walk.

The handlers (one module per kind, see `README.md`) and the table that picks one per type
(`_rules.py`) sit above it; this module's `key` reaches them through `_rules.resolve`, imported
on first use. The walk's bookkeeping (`Walk`, the numbering of objects met again) is in
`_numbering.py`, the containers keyed by identity past the budget in `_frozen.py`, the scans
that give up before a walk that would run out of the budget in `_budget.py`, the memo across
calls in `_memo.py`, and the keys it falls back to (this very object, or a key equal to nothing)
in `_fallbacks.py`.
"""

from collections.abc import Callable
from typing import Any

from . import _ran_out
from ._fallbacks import equal_to_nothing, identity, too_deep, TOO_MANY
from ._frozen import (
    _HELD,
    _Held,
    _items,
    _items_state,
    _nested_state,
    frozen_items,
    frozen_nested,
    frozen_scalars,
    remember_held,
)
from ._numbering import (
    _CUT,
    _DEEP,
    _DEF,
    _forget_since,
    _NOWHERE,
    _SEEN,
    _Seen,
    numbered,
    TooMany,
    Walk,
)
from ._per_class import PerClass
from ._types import Identity
from ._watch import batched_watch, Watch


# Deeper than this, an object is walked later, from the top (`top`), and referred to by number
# (`_CUT`): a 500-deep tuple must not exhaust the stack, neither when its key is computed nor
# when two keys are compared (C recursion, 2 to 4 levels per level of the object, shares the
# limit with the Python frames below it).
MAX_DEPTH = 100
# One key walks at most this many distinct objects (each once, whatever the number of paths to
# it). Past it the outermost tuple or frozenset on the path in which nothing can change
# (`frozen_scalars`), or list, dict or set of such items (`frozen_items`: with its items'
# identities), is keyed by its identity; else the whole object gets a key equal to nothing
# (`TOO_MANY`): every call traces it again, never a wrong answer, and never an unbounded walk
# (a live JAX trace, a library's caches).
MAX_OBJECTS = 50_000


# How many times `top` walks again with one more frozen container keyed by identity.
_RETRIES = 4


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
        "memo",
        "own_eq",
        "abc_token",
        "unread",
        "once",
    )

    def __init__(self, by_value: bool = False) -> None:
        # Lists, dicts and sets made afresh by each flatten (pytree node data) are keyed by their
        # contents alone: a new one per call is not a new key.
        self.by_value = by_value
        self.stack = Walk()
        self.depth = 0
        # What must stay unchanged for the key to stay valid (see `Watch`).
        self.states: list = []
        self.names: list = []
        self.blobs: list = []
        # Whether some part of the key is the identity of a changeable object.
        self.identity = False
        # Whether a NumPy array was keyed by contents where `intern` hands out a read-only copy.
        self.copied_arrays = False
        # The key of every object already keyed in this computation (see `compound`).
        self.memo: dict[int, _Seen] = {}
        # Whether some part is compared by an object's own `==` (`Equal`): shared by `==`, yet
        # never substituted by `intern`.
        self.own_eq = False
        # `abc`'s cache token once this computation watches it (`_registries.watch_abc_token`):
        # one state per key, however many classes it keys.
        self.abc_token: Any = None
        # Whether some part stands for state no key sees (`K-opaque`, `K-impure-library`: a key
        # equal to nothing): the memo then keeps this key for this object alone, never spliced
        # into another object's key (a rebuilt reader of this very function is another reader).
        self.unread = False
        # The states watched once per computation however many objects read them (the thread's
        # decimal context, read by every `Decimal`), by state function: see `watch_once`.
        self.once: dict[Callable[[Any], tuple], tuple] = {}

    def watch_once(self, obj: Any, state_fn: Callable[[Any], tuple]) -> tuple:
        """`state_fn(obj)` now, watched: one entry per computation, however many parts of the
        key depend on it (a tuple of 40,000 `Decimal`s checks the decimal context once a hit,
        not 40,000 times: attack 13a-03). `obj` is the same for every call with `state_fn`."""
        state = self.once.get(state_fn)
        if state is None:
            state = self.once[state_fn] = state_fn(obj)
            self.states.append((obj, state_fn, state))
        return state

    def watch(self) -> Watch:
        return batched_watch(tuple(self.states), tuple(self.names), tuple(self.blobs))

    def extend(self, watch: Watch) -> None:
        self.states.extend(watch.states)
        self.names.extend(watch.names)
        self.blobs.extend(watch.blobs)


Handler = Callable[[Any, Ctx, bool], Any]
# Both by the class's identity, never its metaclass's `==` (`_per_class.py`). Static types
# (builtins, C types), which are never freed, by a plain `dict`; a class Python code made (a heap
# type), weakly: it must be freed once the program drops it.
HANDLERS: dict[int, Handler] = {}
_CLASS_HANDLERS: PerClass[Handler] = PerClass()
_HEAPTYPE = 1 << 9
# `type.__flags__` itself: a metaclass can shadow `cls.__flags__` with an attribute of its own.
_flags: Callable[[type], int] = type.__dict__["__flags__"].__get__


def key(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """The key parts of `obj`. `content_ok`: whether a NumPy array met here may be keyed by its
    contents alone (only through containers that `intern` rebuilds with read-only copies)."""
    t = type(obj)
    i = id(t)
    handler = HANDLERS.get(i)
    if handler is None:
        handler = _CLASS_HANDLERS.get(i) or _handler(t)
    return handler(obj, ctx, content_ok)


def _handler(t: type) -> Handler:
    handler = _rules_resolve(t)
    if _flags(t) & _HEAPTYPE:
        _CLASS_HANDLERS.put(t, handler)
    else:
        HANDLERS[id(t)] = handler
    return handler


def top(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`key` for a whole computation: each object walked once (`compound`), and what sits deeper
    than `MAX_DEPTH` walked afterwards from here, one cut at a time (`_walk`), so that neither the
    walk nor a comparison of keys recurses deeper than `MAX_DEPTH` levels of the object. Past
    `MAX_OBJECTS` objects, the outermost tuple or frozenset on the path to where the budget ran
    out in which nothing can change (`frozen_scalars`) is keyed by its identity, a sound key with
    nothing to watch (the same object hits, a copy never does), and the walk starts again; if
    there is none, the whole of `obj` is keyed as equal to nothing (so the jit layer can say why
    it traces every call) and watched as always changed."""
    reaching = _ran_out.skip(obj, ctx.by_value, content_ok)
    if reaching is not None:
        return equal_to_nothing(obj, ctx, reaching)
    frozen: dict[int, Any] = {}
    linear = True
    path: list = []
    for _ in range(_RETRIES + 2):
        try:
            parts = _walk(obj, ctx, content_ok)
            if (not ctx.stack.done and not ctx.stack.cuts) or numbered(parts):
                _ran_out.walked(obj, ctx.by_value, content_ok)
                return parts
            if not linear:
                break
        except TooMany as e:
            path = e.path
            found = None
            for x in reversed(e.path):
                if id(x) not in frozen and (
                    frozen_scalars(x)
                    or frozen_items(x)
                    or frozen_nested(x)
                    or _frozen_records(x) is not None
                ):
                    found = x
                    break
            if found is None:
                break
            frozen[id(found)] = found
        else:
            # A handler left out of its key an object that was then named by number: walk again
            # without numbers (each object at every path to it, as far as the budget goes).
            linear = False
        ctx.__init__(ctx.by_value)
        ctx.stack.frozen = frozen
        ctx.stack.linear = linear
    reaching = _ran_out.reaching(path)
    _ran_out.ran_out(obj, ctx.by_value, content_ok, reaching)
    return equal_to_nothing(obj, ctx, reaching)


def _walk(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """The key of `obj` and then of each object cut at `MAX_DEPTH` (`compound`), each from the
    top of the stack; the cut ones in a table beside it, `(_DEEP, parts, ((n, parts), ...))`."""
    parts = key(obj, ctx, content_ok)
    cut = ctx.stack.cut
    if not cut:
        return parts
    table = []
    # The objects cut while walking the earlier ones are appended to `cut` as it goes.
    for x, n, x_content_ok in _growing(cut):
        table.append((n, key(x, ctx, x_content_ok)))
    return (_DEEP, parts, tuple(table))


def _growing(items: list) -> Any:
    i = 0
    while i < len(items):
        yield items[i]
        i += 1


def frozen_part(obj: Any, ctx: Ctx) -> Any:
    """The key of a tuple or frozenset that `top` chose to key by identity, else `None`."""
    if id(obj) in ctx.stack.frozen:
        ctx.identity = True
        return (TOO_MANY, Identity(obj))
    return None


def held_items(obj: Any, ctx: Ctx, flat: bool | None = None) -> Any:
    """`K-too-deep`: a list, dict or set too big to walk whose items can never change
    (`frozen_items`, chosen by `top`): keyed by its identity and its items' identities (held, so
    that no other object takes their `id` while the key lives), and watched as its items by `is`
    (one C loop a hit). An unchanged one keeps its key, so a function closing over a 60,000-word
    vocabulary hits; an item added, removed or replaced is another key, never a stale one.
    `flat`: whether `frozen_items` holds (else `frozen_nested` does), where the caller knows."""
    ctx.identity = True
    if flat if flat is not None else frozen_items(obj):
        state_fn, state, held = _items_state, _items_state(obj), _Held(_items(obj))
    else:
        # `frozen_nested`: the containers it holds, and what they hold, by identity, one state.
        state = _nested_state(obj)
        state_fn, held = _nested_state, _Held(state)
    ctx.states.append((obj, state_fn, state))
    remember_held(obj, state_fn, state, held)
    return (TOO_MANY, Identity(obj), held)


_CONTAINERS = _ran_out.CONTAINERS


def budget_left(ctx: Ctx) -> int:
    """How many more objects this computation may walk (`MAX_OBJECTS`, read here at every call,
    so that a test lowering it lowers it for the scans of `_budget.py` too)."""
    return MAX_OBJECTS - ctx.stack.walked


def _frozen_records(x: Any) -> Any:
    # `_records.py` keys what a tuple of frozen records reaches: above this module.
    from ._records import frozen_records

    return frozen_records(x)


def _rules_resolve(t: type) -> Handler:
    from . import _rules

    return _rules.resolve(t)


def compound(fn: Handler) -> Handler:
    """Wraps the handler of an object that contains others: a cycle becomes a relative
    back-reference (so a sub-key means the same wherever it is embedded); an object met again
    reuses its key (each object is walked once); too deep a nesting, or parts that cannot be
    read (an attribute that raises), fall back to identity; past `MAX_OBJECTS` the computation
    stops (`top`)."""

    def handler(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
        i = id(obj)
        walk = ctx.stack
        depth = walk.get(i)
        if depth is not None:
            if depth < walk.low:
                walk.low = depth
            back = walk.back
            if back is None:
                walk.back = {i}
            else:
                back.add(i)
            return ("cycle", ctx.depth - depth)
        here = ctx.depth
        slot = i << 1 | (1 if content_ok else 0)
        seen = ctx.memo.get(slot)
        # Reused only where it stays within the depth limit (a key is compared by recursion).
        if seen is not None and here + seen.height < MAX_DEPTH:
            if here + seen.height > walk.reach:
                walk.reach = here + seen.height
            return seen.use()
        linear = walk.linear
        if linear:
            done = walk.done.get(slot)
            if done is not None:
                return (_SEEN, done[1])
        if here >= MAX_DEPTH:
            return cut(obj, ctx, content_ok, slot) if linear else too_deep(obj, ctx)
        frozen = walk.frozen
        if frozen and i in frozen and id(type(obj)) in _HELD:
            return held_items(obj, ctx)
        walk.walked += 1
        if walk.walked > MAX_OBJECTS:
            raise TooMany()
        defined = len(walk.done)
        low, reach = walk.low, walk.reach
        walk.low, walk.reach = _NOWHERE, here
        walk[i] = here
        ctx.depth = here + 1
        try:
            parts = fn(obj, ctx, content_ok)
        except TooMany as e:
            e.path.append(obj)
            raise
        except RecursionError:
            _forget_since(walk, defined)
            parts = too_deep(obj, ctx)
        except Exception:
            # What it defined before failing is in no key: met again, it is walked again.
            _forget_since(walk, defined)
            parts = identity(obj, ctx)
        finally:
            ctx.depth = here
            del walk[i]
        if walk.low >= here:
            # Every back-reference in it points inside it: the same key wherever it is met.
            ctx.memo[slot] = _Seen(obj, parts, walk.reach - here)
        elif linear:
            # Part of a cycle through an object above it: its key holds back-references that
            # mean something only where it was walked. Met again, it is named by its number
            # rather than walked again at every path to it (each path to a library's classes
            # and functions, reaching each other through their globals, was a walk: 1,355
            # objects of lineax took 50,000).
            number = walk.numbers = walk.numbers + 1
            walk.done[slot] = (obj, number)
            parts = (_DEF, number, parts)
        if low < walk.low:
            walk.low = low
        if reach > walk.reach:
            walk.reach = reach
        return parts

    handler.__name__ = fn.__name__
    handler.__qualname__ = fn.__qualname__
    # Each object it meets for the first time counts once against the budget (`run_out`).
    handler.counted = True  # pyright: ignore[reportFunctionMemberAccess]
    return handler


def cut(obj: Any, ctx: Ctx, content_ok: bool, slot: int) -> Any:
    """An object at `MAX_DEPTH`: named by a number here and walked from the top afterwards
    (`top`), so that a linked list 150 nodes long gets a key (the same unchanged list hits, an
    equal rebuilt tuple chain shares) without recursing past the limit."""
    walk = ctx.stack
    n = walk.cuts.get(slot)
    if n is None:
        walk.walked += 1
        if walk.walked > MAX_OBJECTS:
            raise TooMany()
        n = walk.cuts[slot] = walk.numbers = walk.numbers + 1
        # Never an array by its contents alone below the cut: `intern`'s canonical copies (read-
        # only arrays) stop at `MAX_DEPTH`, so one reached deeper stays the user's own, writable.
        walk.cut.append((obj, n, False))
    return (_CUT, n)
