"""The forms in which `eqxstable.stabilize` stores a static value in a plain module: hashable,
read-only, one per equivalence class.

| Assigned | `eqxstable.stabilize` stores in a plain module |
| --- | --- |
| `list` | [`CanonicalList`][] |
| `dict` | [`CanonicalDict`][] |
| `set` | [`CanonicalSet`][] |
| `frozenset` | [`CanonicalFrozenSet`][] |
| `np.ndarray` | a read-only [`CanonicalArray`][] |
| NumPy scalar | of a subclass of its type |
| tuple, NamedTuple | the same type |

A plain module has no `Static` layer (`_static.py`): the value it stores is what JAX compares, so
the `Canonical*` forms are hashable. Each equivalence class has one `Token` (`_freezer.freeze`
registers it by the class's key), through which its members' `==` and `hash` go: two forms are
`==` exactly when they share a token, so `[1]`, `[1.0]` and `[True]` are never `==` and never
share a compiled program, while equal values rebuilt share one. Against anything else (a plain
`list`) `==` is the original's. Otherwise they behave as the read-back forms (`_readonly.py`)
that they subclass.

**Each module owns its list, dict, set and array** (`OWNED`): `freeze` makes a new object each
time (inner read-only containers and array views included), as an `equinox.Module` holding the
list it was given owns it. Their Python methods refuse a change, but C code writes into a list
subclass past them (`heapq.heappush`, `bisect.insort`, `list.append(x, ...)`,
`dict.__setitem__(d, ...)`, `set.add(s, ...)`, `np.ndarray.shape.__set__(a, ...)`): such a write
changes that module's object alone. Each keeps a snapshot of what it holds, by identity
(`intact`), which `==` checks (a changed form is unequal to every form, so JAX's cache
retraces for it rather than run another module's program) and `hash` checks (it raises
`MSG_CHANGED_IN_PLACE`, naming the field). **Not caught:** plain `equinox.filter_jit` compares
the node data of the very module object whose program it holds by identity (`is` before `==`),
and leaves node data out of a `PyTreeDef`'s hash, so a write into *that* module's value runs its
old program; `eqxstable.filter_jit` watches the form and retraces (`K-canonical-form`). A
frozenset and a NumPy scalar cannot change: one object per class, shared.
"""

from collections.abc import Callable
from typing import Any

import numpy as np

from ._owned import intact, STATES, token_hash

# `_restore` is imported here too: pickles made before the read-back forms moved into
# `_readonly.py` name it as `eqxstable._module._canonical._restore` (or `eqxstable._canonical`).
from ._readonly import (
    _restore as _restore,
    ordered,
    OrderedFrozenSet,
    ReadOnlyDict,
    ReadOnlyList,
    ReadOnlySet,
)


def _restore_canonical(kind: type, value: Any) -> Any:
    from .._registry import intern
    from ._freezer import freeze

    return freeze(ordered(kind, value), lambda x, _: intern(x))


class Canonical:
    """The marker of the hashable canonical forms. `_token` is set on each one that `freeze`
    made (`_freezer.py`): the `Token` of its equivalence class. An instance made otherwise
    (`type(x)(...)`, a view of an array) has none, is not canonical, and behaves as the
    read-only form."""

    __slots__ = ()


def token_of(obj: Any) -> Any:
    """The `Token` of a canonical form that `freeze` made, else `None` (also for an owned form
    changed in place since: see `intact`)."""
    if not isinstance(obj, Canonical):
        return None
    token = getattr(obj, "_token", None)
    if token is None or not intact(obj):
        return None
    return token


def key_of(obj: Any) -> Any:
    """The table key of a canonical form that `freeze` made and that is still as made, else
    `None`."""
    token = token_of(obj)
    return None if token is None else token.key


def _both_canonical(a: Any, b: Any) -> bool:
    return (
        isinstance(b, Canonical)
        and getattr(b, "_token", None) is not None
        and (getattr(a, "_token", None) is not None)
    )


def _canonical_eq(base_eq: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        # Two canonical forms are equal exactly when they are of one class (one token) and both
        # still hold what they were made with: type-exact, so that JAX never takes a program
        # traced for one to be right for the other, nor one traced before a write into either.
        token = getattr(self, "_token", None)
        if token is not None:
            theirs = getattr(other, "_token", None)
            if theirs is not None and isinstance(other, Canonical):
                return token is theirs and intact(self) and intact(other)
        return base_eq(self, other)

    return __eq__


def _canonical_ne(base_ne: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def __ne__(self: Any, other: Any) -> Any:
        if _both_canonical(self, other):
            return not (self._token is other._token and intact(self) and intact(other))
        return base_ne(self, other)

    return __ne__


def _own_copy(self: Any) -> Any:
    # A form of the same class that nothing else holds: a module's copy owns its values, as
    # the copy of an `equinox.Module` holding a list does.
    from ._freezer import freeze

    kind = OWNED[type(self)]
    if kind is np.ndarray:
        return freeze(self.view(np.ndarray))
    return freeze(ordered(kind, self._order if kind is set else kind(self)))


def _copy_within(copy_plain: Callable[[Any, dict], Any]) -> Callable[[Any, dict], Any]:
    def __deepcopy__(self: Any, memo: dict) -> Any:
        # A deep copy of the value itself (`copy.deepcopy(m.widths)`: the memo is still empty)
        # is the user's, a plain one as a copy of the list assigned is; within a larger copy (a
        # module's, whose field must stay hashable) a canonical form of the same class, of the
        # copy's own. (`pickle` cannot tell the two apart: it keeps the canonical form;
        # `list(x)` is a plain copy.)
        if memo and getattr(self, "_token", None) is not None:
            return _own_copy(self)
        return copy_plain(self, memo)

    return __deepcopy__


class CanonicalList(Canonical, ReadOnlyList):
    __slots__ = ("_token", "_snap", "_where", "__weakref__")
    __eq__ = _canonical_eq(list.__eq__)
    __ne__ = _canonical_ne(list.__ne__)
    __hash__ = token_hash  # pyright: ignore[reportAssignmentType]
    # Copies as `ReadOnlyList`'s: plain (`copy.copy` never copies a module's fields).
    __deepcopy__ = _copy_within(ReadOnlyList.__deepcopy__)  # pyright: ignore[reportAssignmentType]

    def __reduce__(self):
        return (_restore_canonical, (list, list(self)))


class CanonicalDict(Canonical, ReadOnlyDict):
    __slots__ = ("_token", "_snap", "_where", "__weakref__")
    __eq__ = _canonical_eq(dict.__eq__)
    __ne__ = _canonical_ne(dict.__ne__)
    __hash__ = token_hash  # pyright: ignore[reportAssignmentType]
    # Copies as `ReadOnlyDict`'s: plain (`copy.copy` never copies a module's fields).
    __deepcopy__ = _copy_within(ReadOnlyDict.__deepcopy__)  # pyright: ignore[reportAssignmentType]

    def __reduce__(self):
        return (_restore_canonical, (dict, dict(self)))


class CanonicalSet(Canonical, ReadOnlySet):
    __slots__ = ("_token", "_snap", "_where")  # Sets can be weakly referenced already.
    __eq__ = _canonical_eq(set.__eq__)
    __ne__ = _canonical_ne(set.__ne__)
    __hash__ = token_hash  # pyright: ignore[reportAssignmentType]
    # Copies as `ReadOnlySet`'s: plain (`copy.copy` never copies a module's fields).
    __deepcopy__ = _copy_within(ReadOnlySet.__deepcopy__)  # pyright: ignore[reportAssignmentType]

    def __reduce__(self):
        return (_restore_canonical, (set, self._order))


class CanonicalFrozenSet(Canonical, OrderedFrozenSet):
    # Immutable: one object per class, shared (its token's `held`).
    __slots__ = ("_token",)  # Sets can be weakly referenced already.
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

    _token: Any = None
    _snap: Any = None
    _where: Any = None

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        array = array.view(np.ndarray)
        return array[()] if return_scalar else array

    def __getitem__(self, index: Any) -> Any:
        return self.view(np.ndarray)[index]

    __eq__ = _canonical_eq(np.ndarray.__eq__)  # pyright: ignore[reportAssignmentType]
    __ne__ = _canonical_ne(np.ndarray.__ne__)  # pyright: ignore[reportAssignmentType]
    __hash__ = token_hash  # pyright: ignore[reportAssignmentType]

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))

    def __copy__(self) -> Any:
        # The user's, writable, as a copy of the array assigned is (see `_copy_within`): in
        # its memory order, as `ndarray.__copy__` keeps it (`W.T` copies Fortran-ordered).
        return self.view(np.ndarray).copy(order="K")

    __deepcopy__ = _copy_within(lambda self, memo: self.view(np.ndarray).copy(order="K"))  # pyright: ignore[reportAssignmentType]

    def __reduce__(self):
        return (_restore_canonical, (np.ndarray, self.view(np.ndarray)))

    def __reduce_ex__(self, protocol: Any):
        return self.__reduce__()


def _array_attribute(name: str) -> property:
    # NumPy lets `a.shape = ...`, `a.dtype = ...` and `a.strides = ...` change even a read-only
    # array in place; a canonical array is shared by every module built from an equal value.
    getset = getattr(np.ndarray, name)

    def setter(self: np.ndarray, value: Any) -> None:
        if self._token is not None or not self.flags.writeable:  # pyright: ignore
            raise ValueError(MSG_READ_ONLY_ARRAY.format(call=f"ndarray.{name} = ..."))
        getset.__set__(self, value)

    return property(getset.__get__, setter, doc=getset.__doc__)


for _name in ("shape", "dtype", "strides"):
    setattr(CanonicalArray, _name, _array_attribute(_name))
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


# By `id` (never the metaclass's `==`); each class made holds its base `t` alive, so no `id`
# here is reused.
_scalar_classes: dict[int, type] = {}


def canonical_scalar_class(t: type) -> type:
    """The canonical class for NumPy scalars of exactly type `t`. The NumPy type comes first
    among its bases: NumPy takes an instance of a class that puts another base first for an
    object, not a number."""
    cls = _scalar_classes.get(id(t))
    if cls is None:
        namespace = {
            "_token": None,
            "_base": t,
            "__eq__": _canonical_eq(getattr(t, "__eq__")),
            "__ne__": _canonical_ne(getattr(t, "__ne__")),
            "__hash__": t.__hash__,
            "__repr__": lambda self: repr(_plain_scalar(self)),
            "__copy__": lambda self: self,
            "__deepcopy__": lambda self, memo: self,
            "__reduce__": lambda self: (_restore_canonical, (np.generic, _plain_scalar(self))),
        }
        cls = _scalar_classes[id(t)] = type(t.__name__, (t, CanonicalScalar), namespace)
        cls.__module__ = __name__
    return cls


STATES.update(
    {
        CanonicalList: STATES[ReadOnlyList],
        CanonicalDict: STATES[ReadOnlyDict],
        CanonicalSet: STATES[ReadOnlySet],
        CanonicalArray: STATES[np.ndarray],
    }
)
# The owned forms: one object per `freeze` (so per module), of the kind assigned.
OWNED: dict[type, type] = {
    CanonicalList: list,
    CanonicalDict: dict,
    CanonicalSet: set,
    CanonicalArray: np.ndarray,
}


def _eqxstable_class(self: Any) -> Any:
    # For the keys layer (`K-canonical-form`, which does not import this layer): the token of
    # an owned form as made, `False` for one changed in place since, `None` for one not made
    # by `freeze`.
    token = getattr(self, "_token", None)
    if token is None:
        return None
    return token if intact(self) else False


for _owned in OWNED:
    _owned.eqxstable_canonical_form = True  # pyright: ignore[reportAttributeAccessIssue]
    _owned.eqxstable_class = _eqxstable_class  # pyright: ignore[reportAttributeAccessIssue]
