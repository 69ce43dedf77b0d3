"""The machinery of one key computation: its context, the recursion with cycles and depth limits,
identity fallbacks, the budget of objects one key may walk, and the memos that make the key of an
already-seen object cheap (within one computation, and across calls).

The handlers, and the table that picks one per type, live in `_values.py`, `_callables.py` and
`_rules.py`; this module's `key` reaches them through `_rules.resolve`, imported on first use.
"""

import operator
import weakref
from collections.abc import Callable
from typing import Any

from ._per_class import PerClass, ref
from ._types import Identity, Key
from ._watch import size, Watch


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
TOO_MANY = "too-many-objects"


class Walk(dict):
    """The objects being keyed, by `id`, with the depth each sits at (so that a cycle becomes a
    back-reference), and the counters of one whole computation. It is shared with the
    computations a handler starts inside it (a `Ctx(by_value=True)` given the same `stack`), so
    the budget and the cycle bookkeeping see them."""

    __slots__ = ("walked", "low", "reach", "frozen", "linear", "done", "cuts", "cut")

    def __init__(self) -> None:
        super().__init__()
        # Whether objects met again are named by number (`compound`); off only when `top` walks
        # again because a number was left without its definition (`numbered`).
        self.linear = True
        # The objects keyed as `(_DEF, n, parts)` (not self-contained: met again, they are
        # `(_SEEN, n)`), by slot: `(object, n)`, in the order they were completed.
        self.done: dict[int, tuple[Any, int]] = {}
        # The objects met at `MAX_DEPTH`, walked later from the top: their numbers by slot, and
        # `(object, n, content_ok)` in the order they were met.
        self.cuts: dict[int, int] = {}
        self.cut: list[tuple[Any, int, bool]] = []
        # Objects walked so far (at most `MAX_OBJECTS`).
        self.walked = 0
        # The lowest depth that a back-reference made since it was last reset points to: a key
        # whose back-references all point inside itself means the same wherever it is embedded.
        self.low = _NOWHERE
        # The deepest level reached since it was last reset (a reused key counts its height).
        self.reach = 0
        # The tuples and frozensets keyed by identity (`frozen_scalars`), by `id`.
        self.frozen: dict[int, Any] = {}


_NOWHERE = 1 << 30


class TooMany(BaseException):
    """Raised past `MAX_OBJECTS`; caught by `top` only (a `BaseException`, so that the handlers'
    own `except Exception` fallbacks never turn it into a partial key). `path`: the objects
    being walked when it was raised, innermost first."""

    def __init__(self) -> None:
        super().__init__()
        self.path: list = []


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

    def watch(self) -> Watch:
        return Watch(tuple(self.states), tuple(self.names), tuple(self.blobs))

    def extend(self, watch: Watch) -> None:
        self.states.extend(watch.states)
        self.names.extend(watch.names)
        self.blobs.extend(watch.blobs)


Handler = Callable[[Any, Ctx, bool], Any]
# Static types (builtins, C types) by a plain `dict` (the fastest lookup); a class Python code
# made (a heap type), weakly: it must be freed once the program drops it (`_per_class.py`).
HANDLERS: dict[type, Handler] = {}
_CLASS_HANDLERS: PerClass[Handler] = PerClass()
_HEAPTYPE = 1 << 9
# `type.__flags__` itself: a metaclass can shadow `cls.__flags__` with an attribute of its own.
_flags: Callable[[type], int] = type.__dict__["__flags__"].__get__


def key(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """The key parts of `obj`. `content_ok`: whether a NumPy array met here may be keyed by its
    contents alone (only through containers that `intern` rebuilds with read-only copies)."""
    t = type(obj)
    handler = HANDLERS.get(t)
    if handler is None:
        handler = _CLASS_HANDLERS.get(ref(t)) or _handler(t)
    return handler(obj, ctx, content_ok)


def _handler(t: type) -> Handler:
    handler = _rules_resolve(t)
    if _flags(t) & _HEAPTYPE:
        _CLASS_HANDLERS.put(t, handler)
    else:
        HANDLERS[t] = handler
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
    frozen: dict[int, Any] = {}
    linear = True
    for _ in range(_RETRIES + 2):
        try:
            parts = _walk(obj, ctx, content_ok)
            if not ctx.stack.done and not ctx.stack.cuts:
                return parts
            if numbered(parts):
                return parts
            if not linear:
                break
        except TooMany as e:
            found = None
            for x in reversed(e.path):
                if id(x) not in frozen and (frozen_scalars(x) or frozen_items(x)):
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
    ctx.states[:] = [(obj, _never, (None,))]
    ctx.names.clear()
    ctx.blobs.clear()
    ctx.identity = True
    ctx.copied_arrays = False
    return (TOO_MANY, Identity(_Unkeyable()))


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


# What `frozen_scalars` accepts: immutable values with nothing inside, and the exact immutable
# containers of them (no subclass: it could hold attributes).
_ATOMS = frozenset({int, str, bytes, bool, float, complex, type(None)})
_FROZEN = (tuple, frozenset)
# The containers that can change in place which `held_items` keys past the budget.
_HELD = frozenset({list, dict, set})


def frozen_scalars(obj: Any) -> bool:
    """Whether `obj` is an exact `tuple` or `frozenset` holding, all the way down, only exact
    tuples, frozensets and the immutable scalars of `_ATOMS`: nothing in it can ever change, so
    its identity is a sound key. Linear in the distinct containers (the types of a container's
    items are scanned in C), without recursion."""
    if type(obj) not in _FROZEN:
        return False
    seen: set[int] = set()
    stack = [obj]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        types = set(map(type, x))
        for t in types:
            if t not in _ATOMS and t not in _FROZEN:
                return False
        if tuple in types or frozenset in types:
            stack.extend([y for y in x if type(y) in _FROZEN])
    return True


def _items(obj: Any) -> tuple:
    if type(obj) is dict:
        return (*obj.keys(), *obj.values())
    return tuple(obj)


def frozen_items(obj: Any) -> bool:
    """Whether `obj` is an exact `list`, `dict` or `set` whose items (a dict's keys and values)
    are all what `frozen_scalars` accepts: past the budget it is keyed by `held_items`."""
    return type(obj) in _HELD and frozen_scalars(_items(obj))


def _items_state(obj: Any) -> tuple:
    if type(obj) is dict:
        return (size(len(obj)), *obj.keys(), *obj.values())
    return (size(len(obj)), *obj)


def held_items(obj: Any, ctx: Ctx) -> Any:
    """`K-too-deep`: a list, dict or set too big to walk whose items can never change
    (`frozen_items`, chosen by `top`): keyed by its identity and its items' identities (held, so
    that no other object takes their `id` while the key lives), and watched as its items by `is`
    (one C loop a hit). An unchanged one keeps its key, so a function closing over a 60,000-word
    vocabulary hits; an item added, removed or replaced is another key, never a stale one."""
    ctx.identity = True
    ctx.states.append((obj, _items_state, _items_state(obj)))
    return (TOO_MANY, Identity(obj), _Held(_items(obj)))


class _Held:
    """Items compared by identity (`is`), never by their `==` (`1 == 1.0 == True`); hashed by
    their `id`s, computed once."""

    __slots__ = ("items", "_hash")

    def __init__(self, items: tuple):
        self.items = items
        self._hash: int | None = None

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash(tuple(map(id, self.items)))
        return h

    def __eq__(self, other: object) -> bool:
        if type(other) is not _Held:
            return False
        a, b = self.items, other.items
        return a is b or (len(a) == len(b) and all(map(operator.is_, a, b)))

    def __repr__(self) -> str:
        return f"<{len(self.items)} items by identity>"


def _rules_resolve(t: type) -> Handler:
    from . import _rules

    return _rules.resolve(t)


class Shared:
    """A key met again in one computation (an object reached by a second path): the same parts,
    with a hash computed once. Keys are then as large as the distinct objects they cover, not
    as the paths to them (`node = [node, node]`, 30 levels, is 31 lists, not 2**30 paths).

    It equals whatever its parts equal (a structure with a shared part and one with two equal
    parts have equal keys, as they had before keys were shared). Two equal `Shared` then hold
    the same parts, so the next comparison of them is an identity check: comparing two keys
    costs what they have of distinct parts."""

    __slots__ = ("parts", "_hash")

    def __init__(self, parts: tuple):
        self.parts = parts
        self._hash: int | None = None

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash(self.parts)
        return h

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is Shared:
            if self.parts is other.parts:
                return True
            if self.__hash__() != other.__hash__():
                return False
            equal = self.parts == other.parts
            if equal:
                self.parts = other.parts
            return equal
        return self.parts == other

    def __repr__(self) -> str:
        # Never the parts: printed in full, a shared structure is as long as its paths.
        return f"<shared {type(self.parts).__name__}>"


class _Seen:
    """An object keyed earlier in this computation: held, so that its `id` is not reused."""

    __slots__ = ("obj", "parts", "height", "shared")

    def __init__(self, obj: Any, parts: Any, height: int):
        self.obj = obj
        self.parts = parts
        self.height = height
        self.shared: Any = None

    def use(self) -> Any:
        shared = self.shared
        if shared is None:
            parts = self.parts
            shared = self.shared = Shared(parts) if isinstance(parts, tuple) else parts
        return shared


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
        if frozen and i in frozen and type(obj) in _HELD:
            return held_items(obj, ctx)
        walk.walked += 1
        if walk.walked > MAX_OBJECTS:
            raise TooMany()
        number = walk.walked
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
            walk.done[slot] = (obj, number)
            parts = (_DEF, number, parts)
        if low < walk.low:
            walk.low = low
        if reach > walk.reach:
            walk.reach = reach
        return parts

    handler.__name__ = fn.__name__
    handler.__qualname__ = fn.__qualname__
    return handler


class _Tag:
    """A marker of the numbered parts of a key, which no value's key can hold."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


# `(_DEF, n, parts)`: the object numbered `n`; `(_SEEN, n)`: that object met again;
# `(_CUT, n)`: an object walked later from the top, whose parts are `n`'s in the table of
# `(_DEEP, parts, ((n, parts), ...))`.
_DEF, _SEEN, _CUT, _DEEP = _Tag("def"), _Tag("seen"), _Tag("cut"), _Tag("deep")


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
        n = walk.cuts[slot] = walk.walked
        # Never an array by its contents alone below the cut: `intern`'s canonical copies (read-
        # only arrays) stop at `MAX_DEPTH`, so one reached deeper stays the user's own, writable.
        walk.cut.append((obj, n, False))
    return (_CUT, n)


def _forget_since(walk: Walk, defined: int) -> None:
    # The objects numbered since `defined`, in the order they were completed: all inside the
    # object whose key failed, so no part of the key names them.
    while len(walk.done) > defined:
        walk.done.popitem()


def numbered(parts: Any) -> bool:
    """Whether every number in a key names an object whose key is in it: each `(_SEEN, n)` has
    its `(_DEF, n, ...)`, each `(_CUT, n)` its row in the `_DEEP` table, and no number is
    defined twice by different parts. A handler that walked an object and then left it out of
    its key (an identity fallback) would otherwise leave a number that says nothing, and two
    different objects could share it. Linear in the key's distinct parts; tuples of scalars are
    passed over by a scan of their types in C."""
    defined: dict[int, int] = {}
    named: list[int] = []
    if type(parts) is tuple and len(parts) == 3 and parts[0] is _DEEP:
        for n, row in parts[2]:
            defined[n] = id(row)
    met: set[int] = set()
    stack = [parts]
    while stack:
        node = stack.pop()
        if type(node) is Shared:
            node = node.parts
        if id(node) in met:
            continue
        met.add(id(node))
        if isinstance(node, tuple):
            if len(node) == 2 and (node[0] is _SEEN or node[0] is _CUT):
                named.append(node[1])
                continue
            if len(node) == 3 and node[0] is _DEF:
                n = node[1]
                if defined.setdefault(n, id(node)) != id(node):
                    return False
        elif type(node) is not frozenset:
            continue
        types = set(map(type, node))
        if not types <= _ATOMS:
            stack.extend(node)
    return all(n in defined for n in named)


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
