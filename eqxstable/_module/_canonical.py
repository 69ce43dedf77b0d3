"""The forms in which a static value is read back: the value as assigned, read-only.

A static field is part of the PyTree structure, where JAX and Equinox hash it and compare it
with `==`, so its value must not change. What the module's code reads must still behave as what
was assigned, in every way the code can observe: `==` with the original kind, iteration order,
`isinstance`, `jax.tree_util`'s view of it, `repr`, copies and serialisers (`json`, `pickle`,
`yaml`). The only difference allowed is that changing it raises an error that says the fix.

| Assigned | `StableModule` reads back | `eqxstable.stabilize` stores in a plain module |
| --- | --- | --- |
| `list` | a plain `list`, copied from a [`ReadOnlyList`][] (`_plain.py`) | [`CanonicalList`][] |
| `dict` | a plain `dict`, copied from a [`ReadOnlyDict`][] | [`CanonicalDict`][] |
| `set` | [`ReadOnlySet`][] (iterates as the original did) | [`CanonicalSet`][] |
| `frozenset` | itself, or an [`OrderedFrozenSet`][] | [`CanonicalFrozenSet`][] |
| `np.ndarray` | a read-only `np.ndarray` | a read-only [`CanonicalArray`][] |
| NumPy scalar | itself (an `np.void`, a view: a read-only copy) | of a subclass of its type |
| tuple, NamedTuple | the same type | the same type |

A `StableModule` hashes and compares its static fields through their canonical `Static`
(`_static.py`), so what its code reads needs no hash and keeps Python's `==`. A plain module has
no such layer: the value it stores is what JAX compares, so the `Canonical*` forms are hashable,
and there is one of each per equivalence class (`_static.freeze`), compared by identity among
themselves: `[1]`, `[1.0]` and `[True]` are three forms, never `==`, so they never share a
compiled program. Against anything else (a plain `list`) `==` is the original's.
"""

import importlib.util
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import jax.tree_util as jtu
import numpy as np


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
    # Copies and unpickling of a read-back form: the same read-only form. (A module's copy gets
    # the canonical `Static` back through `Static.__reduce__`; an object that the copied value
    # held twice is one object in the copy too, by the copy's memo.)
    if kind is list:
        return ReadOnlyList(value)
    if kind is dict:
        return ReadOnlyDict(value)
    return _ordered(kind, value)


def _restore_canonical(kind: type, value: Any) -> Any:
    from .._registry import intern
    from ._static import freeze

    return freeze(_ordered(kind, value), lambda x, _: intern(x))


def _ordered(kind: type, value: Any) -> Any:
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

    def __reduce__(self):
        return (_restore, (list, list(self)))

    def __repr__(self) -> str:
        return list.__repr__(self)


class ReadOnlyDict(dict):
    """A `dict` that cannot be changed: a static field's dict as the module's code reads it.
    `isinstance(x, dict)`, `==` with a dict, `json.dumps` and `dict(x)` behave as on the dict."""

    __slots__ = ()

    def __reduce__(self):
        return (_restore, (dict, dict(self)))

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


class Canonical:
    """The marker of the hashable canonical forms. `_key` is set on the one registered instance
    of each equivalence class (`_static.py`); an instance made otherwise (`type(x)(...)`, a view
    of an array) is not canonical, and behaves as the read-only form."""

    __slots__ = ()


def key_of(obj: Any) -> Any:
    """The table key of a registered canonical form, else `None`."""
    return getattr(obj, "_key", None) if isinstance(obj, Canonical) else None


def _both_canonical(a: Any, b: Any) -> bool:
    return isinstance(b, Canonical) and key_of(b) is not None and key_of(a) is not None


def _canonical_eq(base_eq: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        # Two canonical forms are equal exactly when they are one object: type-exact, so that
        # JAX never takes a program traced for one to be right for the other.
        if _both_canonical(self, other):
            return self is other
        return base_eq(self, other)

    return __eq__


def _canonical_ne(base_ne: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def __ne__(self: Any, other: Any) -> Any:
        if _both_canonical(self, other):
            return self is not other
        return base_ne(self, other)

    return __ne__


def _kind_name(cls: type) -> str:
    for base in cls.__mro__:
        if base.__module__ == "builtins":
            return base.__name__
        if base.__module__ == "numpy":
            return f"numpy.{base.__name__}"
    return cls.__name__


def _identity_hash(self: Any) -> int:
    # The originals cannot be hashed: only the registered form, by identity, as it is the one
    # object of its class.
    if key_of(self) is None:
        raise TypeError(f"unhashable type: {_kind_name(type(self))!r}")
    return object.__hash__(self)


class CanonicalList(Canonical, ReadOnlyList):
    __slots__ = ("_key", "__weakref__")
    __eq__ = _canonical_eq(list.__eq__)
    __ne__ = _canonical_ne(list.__ne__)
    __hash__ = _identity_hash  # pyright: ignore[reportAssignmentType]

    def __reduce__(self):
        return (_restore_canonical, (list, list(self)))


class CanonicalDict(Canonical, ReadOnlyDict):
    __slots__ = ("_key", "__weakref__")
    __eq__ = _canonical_eq(dict.__eq__)
    __ne__ = _canonical_ne(dict.__ne__)
    __hash__ = _identity_hash  # pyright: ignore[reportAssignmentType]

    def __reduce__(self):
        return (_restore_canonical, (dict, dict(self)))


class CanonicalSet(Canonical, ReadOnlySet):
    __slots__ = ("_key",)  # Sets can be weakly referenced already.
    __eq__ = _canonical_eq(set.__eq__)
    __ne__ = _canonical_ne(set.__ne__)
    __hash__ = _identity_hash  # pyright: ignore[reportAssignmentType]

    def __reduce__(self):
        return (_restore_canonical, (set, self._order))


class CanonicalFrozenSet(Canonical, OrderedFrozenSet):
    __slots__ = ("_key",)  # Sets can be weakly referenced already.
    __eq__ = _canonical_eq(frozenset.__eq__)
    __ne__ = _canonical_ne(frozenset.__ne__)
    # By its items, as `==` with a plain frozenset requires.
    __hash__ = frozenset.__hash__

    def __reduce__(self):
        return (_restore_canonical, (frozenset, self._order))


MSG_READ_ONLY_ARRAY = (
    "`{call}`: this array is the value of a static field (of a module passed through "
    "`eqxstable.stabilize`), so it is read-only: it is part of the PyTree structure, and a "
    "compiled program was traced for this value. Change a copy instead (`np.array(...)` of it), "
    "or build a new model with the new value."
)


def _array_read_only(name: str) -> Callable[..., Any]:
    base = getattr(np.ndarray, name)

    def method(self: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        if not self.flags.writeable:
            raise ValueError(MSG_READ_ONLY_ARRAY.format(call=f"ndarray.{name}"))
        return base(self, *args, **kwargs)

    method.__name__ = name
    return method


class CanonicalArray(Canonical, np.ndarray):
    """The canonical, hashable, read-only form of a static NumPy array in a plain module.

    An `np.ndarray` (`isinstance` holds), whose `==` is elementwise, as the original's, except
    against another canonical array: two of them are equal exactly when they are one object
    (the same dtype, shape and bytes), so that JAX can compare two structures holding them.
    What is computed from it (`a + 1`, `a[1:]`, `np.argsort(a)`) is an ordinary array.
    """

    _key: Any = None

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        array = array.view(np.ndarray)
        return array[()] if return_scalar else array

    def __getitem__(self, index: Any) -> Any:
        return self.view(np.ndarray)[index]

    __eq__ = _canonical_eq(np.ndarray.__eq__)  # pyright: ignore[reportAssignmentType]
    __ne__ = _canonical_ne(np.ndarray.__ne__)  # pyright: ignore[reportAssignmentType]
    __hash__ = _identity_hash  # pyright: ignore[reportAssignmentType]

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))

    def __copy__(self) -> Any:
        return self if self._key is not None else self.view(np.ndarray).copy()

    def __deepcopy__(self, memo: Any) -> Any:
        return self if self._key is not None else self.view(np.ndarray).copy()

    def __reduce__(self):
        return (_restore_canonical, (np.ndarray, self.view(np.ndarray)))

    def __reduce_ex__(self, protocol: Any):
        return self.__reduce__()


for _name in ("__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__"):
    setattr(CanonicalArray, _name, _array_read_only(_name))
for _name in ("__imod__", "__ipow__", "__imatmul__", "__iand__", "__ior__", "__ixor__", "fill"):
    setattr(CanonicalArray, _name, _array_read_only(_name))
del _name


class CanonicalScalar(Canonical):
    """The marker of the canonical forms of NumPy scalars in a plain module: an instance of a
    subclass of the scalar's own type (`np.float32(2)` reads back as a `np.float32`), equal to
    another canonical scalar exactly when it is that object (`np.float32(2) == np.float64(2)`
    in NumPy: they would share a program that computes in the wrong dtype)."""

    __slots__ = ()


def _plain_scalar(x: Any) -> Any:
    # `np.float32(x)` returns `x` itself when it is a `float32` already.
    return np.asarray(x)[()]


_scalar_classes: dict[type, type] = {}


def canonical_scalar_class(t: type) -> type:
    """The canonical class for NumPy scalars of exactly type `t`. The NumPy type comes first
    among its bases: NumPy takes an instance of a class that puts another base first for an
    object, not a number."""
    cls = _scalar_classes.get(t)
    if cls is None:
        namespace = {
            "_key": None,
            "_base": t,
            "__eq__": _canonical_eq(getattr(t, "__eq__")),
            "__ne__": _canonical_ne(getattr(t, "__ne__")),
            "__hash__": t.__hash__,
            "__repr__": lambda self: repr(_plain_scalar(self)),
            "__copy__": lambda self: self,
            "__deepcopy__": lambda self, memo: self,
            "__reduce__": lambda self: (_restore_canonical, (np.generic, _plain_scalar(self))),
        }
        cls = _scalar_classes[t] = type(t.__name__, (t, CanonicalScalar), namespace)
        cls.__module__ = __name__
    return cls


# What each read-back form stands for: the kind of value a walk sees it as.
VIEW_BASES: dict[type, type] = {
    ReadOnlyList: list,
    ReadOnlyDict: dict,
    ReadOnlySet: set,
    OrderedFrozenSet: frozenset,
    CanonicalList: list,
    CanonicalDict: dict,
    CanonicalSet: set,
    CanonicalFrozenSet: frozenset,
}


def _node(kind: type) -> tuple[Callable, Callable, Callable]:
    # As JAX sees the original: its items are the children (a dict's in sorted key order, with
    # JAX's own errors), and what is rebuilt from them is a plain `list` or `dict`, as
    # `jax.tree.map` over the original returns.
    def flatten_with_keys(x: Any) -> tuple[list, Any]:
        plain = kind(x)
        children, treedef = jtu.tree_flatten_with_path(plain, is_leaf=lambda y: y is not plain)
        return [(path[0], child) for path, child in children], treedef

    def flatten(x: Any) -> tuple[list, Any]:
        plain = kind(x)
        return jtu.tree_flatten(plain, is_leaf=lambda y: y is not plain)

    def unflatten(treedef: Any, children: Any) -> Any:
        return jtu.tree_unflatten(treedef, children)

    return flatten_with_keys, unflatten, flatten


for _cls in (ReadOnlyList, CanonicalList, ReadOnlyDict, CanonicalDict):
    jtu.register_pytree_with_keys(_cls, *_node(VIEW_BASES[_cls]))
del _cls


def _register_yaml() -> None:
    # PyYAML picks a representer by exact type, and refuses a subclass of `list`, `dict` or
    # `set` in `safe_dump`: these are dumped as what they stand for.
    if importlib.util.find_spec("yaml") is None:
        return
    from yaml.representer import Representer, SafeRepresenter

    for cls, kind in VIEW_BASES.items():
        if kind is frozenset:
            continue  # Not representable by `safe_dump`, as the original.
        method = {list: "represent_list", dict: "represent_dict", set: "represent_set"}[kind]
        for representer in (SafeRepresenter, Representer):
            representer.add_representer(cls, getattr(representer, method))


_register_yaml()
