"""The bookkeeping of one walk: the objects being keyed (`Walk`), with the numbers that name an
object met again (`(_DEF, n, parts)`, `(_SEEN, n)`, `(_CUT, n)`), the keys reused within one
computation (`Shared`), and the check that every number in a finished key has its definition
(`numbered`). The recursion that fills them is `_context.compound`.
"""

from typing import Any

from ._frozen import _ATOMS


class Walk(dict):
    """The objects being keyed, by `id`, with the depth each sits at (so that a cycle becomes a
    back-reference), and the counters of one whole computation. It is shared with the
    computations a handler starts inside it (a `Ctx(by_value=True)` given the same `stack`), so
    the budget and the cycle bookkeeping see them."""

    __slots__ = (
        "walked",
        "low",
        "reach",
        "frozen",
        "linear",
        "done",
        "cuts",
        "cut",
        "numbers",
        "back",
    )

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
        # The last number given to an object keyed as `(_DEF, n, parts)` or cut (`_CUT`). Only
        # those objects count, each when it is numbered (a `_DEF` when it is complete), never
        # the objects walked: a sub-key reused from a memo walks nothing, so a count of walked
        # objects would number one structure two ways (a missed sharing). Counted so, the
        # numbers follow the structure alone.
        self.numbers = 0
        # Objects walked so far (at most `MAX_OBJECTS`).
        self.walked = 0
        # The lowest depth that a back-reference made since it was last reset points to: a key
        # whose back-references all point inside itself means the same wherever it is embedded.
        self.low = _NOWHERE
        # The deepest level reached since it was last reset (a reused key counts its height).
        self.reach = 0
        # The tuples and frozensets keyed by identity (`frozen_scalars`), by `id`.
        self.frozen: dict[int, Any] = {}
        # The `id`s of the objects a back-reference pointed to (a cycle through them): a function
        # whose state reaches itself (`_functions.function`). Made at the first one.
        self.back: set[int] | None = None


_NOWHERE = 1 << 30


class TooMany(BaseException):
    """Raised past `MAX_OBJECTS`; caught by `top` only (a `BaseException`, so that the handlers'
    own `except Exception` fallbacks never turn it into a partial key). `path`: the objects
    being walked when it was raised, innermost first."""

    def __init__(self) -> None:
        super().__init__()
        self.path: list = []


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


def _forget_since(walk: Walk, defined: int) -> None:
    # The objects numbered since `defined`, in the order they were completed: all inside the
    # object whose key failed, so no part of the key names them. Their numbers are not given
    # again: a sub-key kept in a memo inside the failed object may still name them.
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
        types = set(map(id, map(type, node)))
        if not types <= _ATOMS:
            stack.extend(node)
    return all(n in defined for n in named)
