"""The forms in which a `StableModule`'s static value is read back: the value as assigned,
read-only.

A static field is part of the PyTree structure, where JAX and Equinox hash it and compare it
with `==`, so its value must not change. What the module's code reads must still behave as what
was assigned, in every way the code can observe: `==` with the original kind, iteration order,
`isinstance`, `jax.tree_util`'s view of it (`_views.py`), `repr`, copies and serialisers (`json`,
`pickle`, `yaml`). The only difference allowed is that changing it raises an error that says the
fix.

| Assigned | `StableModule` reads back |
| --- | --- |
| `list` | a plain `list`, copied from a [`ReadOnlyList`][] (`_plain.py`), checked (`_handed.py`) |
| `dict` | a plain `dict`, copied from a [`ReadOnlyDict`][], checked likewise |
| `set` | [`ReadOnlySet`][] (iterates as the original did) |
| `frozenset` | itself, or an [`OrderedFrozenSet`][] |
| `np.ndarray` | a read-only `np.ndarray` |
| NumPy scalar | itself (an `np.void`, a view: a read-only copy) |
| tuple, NamedTuple | the same type |

A `StableModule` hashes and compares its static fields through their canonical `Static`
(`_static.py`), so what its code reads needs no hash and keeps Python's `==`. The same forms hold
the items inside a plain module's canonical forms (`_canonical.py`), which subclass them.
"""

from collections.abc import Callable, Iterable
from copy import deepcopy
from typing import Any, NoReturn


MSG_READ_ONLY = (
    "`{cls}.{method}`: this {cls} is the value of a static field (of an "
    "`eqxstable.StableModule`, or of a module passed through `eqxstable.stabilize`), so it is "
    "read-only: it is part of the PyTree structure, and a compiled program was traced for this "
    "value. Change a copy instead (`{cls}(...)` of it), or build a new model with the new value."
)


def _read_only(base: type, name: str) -> Callable[..., NoReturn]:
    def method(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(MSG_READ_ONLY.format(cls=base.__name__, method=name))

    method.__name__ = name
    return method


def _forbid(cls: type, base: type, names: Iterable[str]) -> None:
    for name in names:
        setattr(cls, name, _read_only(base, name))


def _restore(kind: type, value: Any) -> Any:
    # Unpickling a read-back form (a set; a list or dict pickled before their copies became
    # plain, see `ReadOnlyList`): the same read-only form. (A module's copy gets the canonical
    # `Static` back through `Static.__reduce__`.)
    if kind is list:
        return ReadOnlyList(value)
    if kind is dict:
        return ReadOnlyDict(value)
    return ordered(kind, value)


def _deep_list(obj: list, memo: dict) -> list:
    # A plain deep copy, its items copied through the same memo (`x = [x]` copies as itself).
    out: list = []
    memo[id(obj)] = out
    out.extend(deepcopy(x, memo) for x in list.__iter__(obj))
    return out


def _deep_dict(obj: dict, memo: dict) -> dict:
    out: dict = {}
    memo[id(obj)] = out
    for k, v in dict.items(obj):
        out[deepcopy(k, memo)] = deepcopy(v, memo)
    return out


def ordered(kind: type, value: Any) -> Any:
    """`value` as a container of kind `kind` that iterates in the order of `value`."""
    if kind is set:
        return ReadOnlySet._make(value)
    if kind is frozenset:
        return OrderedFrozenSet._make(value)
    if kind is list or kind is dict:
        return kind(value)
    return value  # A NumPy array or scalar.


class ReadOnlyList(list):
    """A `list` that cannot be changed: a static field's list as the module's code reads it."""

    __slots__ = ()

    # A copy is the user's (the error says "change a copy instead"): a plain `list`, as a copy
    # of the list assigned is; so are pickles, and `list(x)`. (A module's copy freezes it again.)
    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> Any:
        return _deep_list(self, memo)

    def __reduce__(self) -> Any:
        return (list, (list(self),))

    def __repr__(self) -> str:
        return list.__repr__(self)


class ReadOnlyDict(dict):
    """A `dict` that cannot be changed: a static field's dict as the module's code reads it.
    `isinstance(x, dict)`, `==` with a dict, `json.dumps` and `dict(x)` behave as on the dict."""

    __slots__ = ()

    def __copy__(self) -> dict:  # A plain `dict`, as `ReadOnlyList`'s copies.
        return dict(self)

    def __deepcopy__(self, memo: dict) -> Any:
        return _deep_dict(self, memo)

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))

    def __repr__(self) -> str:
        return dict.__repr__(self)


class ReadOnlySet(set):
    """A `set` that cannot be changed, and iterates in the order the assigned set did (which
    depends on its insertion history, not only on its items)."""

    __slots__ = ("_order",)

    def __init__(self, items: Iterable = ()):
        s = set(items)
        set.__init__(self, s)
        self._order = tuple(s)

    @classmethod
    def _make(cls, items: Iterable) -> Any:
        """An instance that iterates in the order of `items` (distinct, hashable)."""
        self = cls.__new__(cls)
        order = tuple(items)
        # From a `set`, the table is merged as `set(items)` would lay it out.
        set.__init__(self, items if type(items) is set else order)
        self._order = order
        return self

    def __iter__(self):
        return iter(self._order)

    # A copy of the value itself is a plain `set`, as `ReadOnlyList`'s copies, laid out as a
    # copy of the assigned set is: a shallow one from the table (made from that set, `_make`),
    # a deep one from the items in the order they iterate (as `set.__reduce__` lists them).
    # Within a larger copy (the memo holds its container: a module's, whose copy must iterate
    # as the module does, which a plain set laid out afresh may not) and in a pickle (which
    # cannot tell a module's pickle apart), the read-only form in its order.
    def __copy__(self) -> set:
        return set.copy(self)

    def __deepcopy__(self, memo: dict) -> Any:
        within = bool(memo)  # Before the items' copies fill it.
        items = [deepcopy(x, memo) for x in self._order]
        return _restore(set, items) if within else set(items)

    def __reduce__(self):
        return (_restore, (set, self._order))

    def __repr__(self) -> str:
        return "{" + ", ".join(map(repr, self._order)) + "}" if self._order else "set()"


class OrderedFrozenSet(frozenset):
    """A `frozenset` that iterates in a given order: the read-back form of a frozenset whose
    items were replaced by their canonical instances, which could lay out differently."""

    __slots__ = ("_order",)

    @classmethod
    def _make(cls, items: Iterable) -> Any:
        order = tuple(items)
        self = frozenset.__new__(cls, order)
        self._order = order
        return self

    def __iter__(self):
        return iter(self._order)

    def __reduce__(self):
        return (_restore, (frozenset, self._order))

    def __repr__(self) -> str:
        inner = "{" + ", ".join(map(repr, self._order)) + "}" if self._order else ""
        return f"frozenset({inner})"


_forbid(ReadOnlyList, list, ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append"))
_forbid(ReadOnlyList, list, ("clear", "extend", "insert", "pop", "remove", "reverse", "sort"))
_forbid(ReadOnlyDict, dict, ("__setitem__", "__delitem__", "__ior__", "clear", "pop", "popitem"))
_forbid(ReadOnlyDict, dict, ("setdefault", "update"))
_forbid(ReadOnlySet, set, ("__ior__", "__iand__", "__isub__", "__ixor__", "add", "clear"))
_forbid(ReadOnlySet, set, ("discard", "difference_update", "intersection_update", "pop"))
_forbid(ReadOnlySet, set, ("remove", "symmetric_difference_update", "update"))
