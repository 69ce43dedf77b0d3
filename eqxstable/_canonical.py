"""Hashable canonical forms for the values of static fields.

`equinox.field(static=True)` puts a value into the PyTree structure, where JAX hashes it and
compares it with `==`. Lists, dicts, sets and NumPy arrays cannot be hashed (and an array's `==`
is elementwise), so [`freeze`][] turns them into `tuple`, [`FrozenDict`][], `frozenset` and
[`ReadOnlyArray`][]. Both new types compare **type-exactly** by content, as
[`eqxstable.stable_key`][] does: `FrozenDict(a=1) != FrozenDict(a=1.0)` and a `float32` array is
never equal to a `float64` one, so that a compiled program is never reused for a value that
would compute differently.
"""

import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from ._keys import stable_key
from ._static import VIEW_BASES


_K = TypeVar("_K")
_V = TypeVar("_V")


class FrozenDict(Mapping[_K, _V]):
    """An immutable, hashable mapping that reads like a `dict`.

    Static fields holding a `dict` are stored as a `FrozenDict`: `m.config["lr"]`,
    `m.config.get("lr")`, `m.config.items()`, `"lr" in m.config` and `dict(m.config)` all work.
    Equality and hash are type-exact on keys and values (see [`eqxstable.stable_key`][]), and
    insertion order is part of the value: code that iterates over the mapping may depend on it,
    so two mappings that iterate differently must not share a compiled program.
    """

    __slots__ = ("_dict", "_hash", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any):
        self._dict: dict[Any, Any] = dict(*args, **kwargs)
        self._hash: int | None = None

    def __getitem__(self, key: _K) -> _V:
        return self._dict[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._dict)

    def __contains__(self, key: object) -> bool:
        return key in self._dict

    def __repr__(self) -> str:
        return f"FrozenDict({self._dict!r})"

    def __reduce__(self):
        return (FrozenDict, (self._dict,))

    def __or__(self, other: Mapping) -> "FrozenDict":
        return FrozenDict({**self._dict, **other})

    def _content(self) -> tuple:
        # Stable keys, not the values themselves: `1 == 1.0 == True` and `0.0 == -0.0` in
        # Python, but they are different static values to a traced computation.
        return tuple((stable_key(k), stable_key(v)) for k, v in self._dict.items())

    def __hash__(self) -> int:
        # Cached: a stale hash can only make two equal mappings miss each other (a recompile),
        # never make two different ones equal, because `__eq__` is always computed afresh.
        if self._hash is None:
            self._hash = hash(self._content())
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not FrozenDict or len(self._dict) != len(other._dict):
            return False
        # Fast path: canonical mappings built from equivalent parts hold the very same keys and
        # (interned) values in the same order.
        if all(
            k1 is k2 and v1 is v2
            for (k1, v1), (k2, v2) in zip(self._dict.items(), other._dict.items())
        ):
            return True
        return self._content() == other._content()

    def __ne__(self, other: object) -> bool:
        return not self == other


def _binary(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def method(self: "ReadOnlyArray", other: Any) -> Any:
        return op(self._array, _unwrap(other))

    return method


def _reflected(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def method(self: "ReadOnlyArray", other: Any) -> Any:
        # `operator.mul(jax_array, ndarray)` lets JAX handle the NumPy operand, also under `jit`.
        return op(_unwrap(other), self._array)

    return method


def _unary(op: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def method(self: "ReadOnlyArray") -> Any:
        return op(self._array)

    return method


def _unwrap(x: Any) -> Any:
    return x._array if type(x) is ReadOnlyArray else x


class ReadOnlyArray:
    """A read-only NumPy array that can be hashed, for static fields.

    It holds its own read-only copy (`.array`), so the value cannot change after it was hashed.
    `np.asarray(x)` and `jnp.asarray(x)` give the array back, indexing, `len`, iteration,
    `.shape`, `.dtype`, arithmetic and `@` work as on the array (so `self.table * x` works inside
    `jit`). `==` is **not** elementwise: two holders are equal when their dtype, shape and bytes
    are equal (so `-0.0 != 0.0`, and a NaN equals a NaN with the same bits). Use
    `np.asarray(x) == y` for an elementwise comparison.
    """

    __slots__ = ("_array", "_hash", "__weakref__")

    def __init__(self, array: Any):
        copy = np.array(array, copy=True)
        copy.flags.writeable = False
        self._array: np.ndarray = copy
        if copy.dtype.hasobject:
            # The bytes of an object array are pointers: such a holder only equals itself.
            self._hash = object.__hash__(self)
        else:
            # The dtype itself, not `dtype.str`: `int4` and `uint4`, or two structured dtypes
            # with other fields, share a `str` and compute differently.
            self._hash = hash((copy.dtype, copy.shape, copy.tobytes()))

    @property
    def array(self) -> np.ndarray:
        """The read-only NumPy array."""
        return self._array

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def dtype(self) -> np.dtype:
        return self._array.dtype

    @property
    def ndim(self) -> int:
        return self._array.ndim

    @property
    def size(self) -> int:
        return self._array.size

    def tolist(self) -> Any:
        return self._array.tolist()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if dtype is not None and np.dtype(dtype) != self._array.dtype:
            return self._array.astype(dtype)
        return self._array.copy() if copy else self._array

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, index: Any) -> Any:
        return self._array[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._array)

    def __repr__(self) -> str:
        return f"ReadOnlyArray({self._array!r})"

    def __reduce__(self):
        return (ReadOnlyArray, (self._array,))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not ReadOnlyArray or self._hash != other._hash:
            return False
        a, b = self._array, other._array
        if a.dtype.hasobject or b.dtype.hasobject:
            return False
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

    def __ne__(self, other: object) -> bool:
        return not self == other

    __bool__ = _unary(bool)
    __int__ = _unary(int)
    __float__ = _unary(float)
    __complex__ = _unary(complex)
    __index__ = _unary(operator.index)
    __neg__ = _unary(operator.neg)
    __pos__ = _unary(operator.pos)
    __abs__ = _unary(operator.abs)
    __invert__ = _unary(operator.invert)
    __lt__ = _binary(operator.lt)
    __le__ = _binary(operator.le)
    __gt__ = _binary(operator.gt)
    __ge__ = _binary(operator.ge)
    __add__, __radd__ = _binary(operator.add), _reflected(operator.add)
    __sub__, __rsub__ = _binary(operator.sub), _reflected(operator.sub)
    __mul__, __rmul__ = _binary(operator.mul), _reflected(operator.mul)
    __truediv__, __rtruediv__ = _binary(operator.truediv), _reflected(operator.truediv)
    __floordiv__, __rfloordiv__ = _binary(operator.floordiv), _reflected(operator.floordiv)
    __mod__, __rmod__ = _binary(operator.mod), _reflected(operator.mod)
    __pow__, __rpow__ = _binary(operator.pow), _reflected(operator.pow)
    __matmul__, __rmatmul__ = _binary(operator.matmul), _reflected(operator.matmul)
    __and__, __rand__ = _binary(operator.and_), _reflected(operator.and_)
    __or__, __ror__ = _binary(operator.or_), _reflected(operator.or_)
    __xor__, __rxor__ = _binary(operator.xor), _reflected(operator.xor)
    __lshift__, __rlshift__ = _binary(operator.lshift), _reflected(operator.lshift)
    __rshift__, __rrshift__ = _binary(operator.rshift), _reflected(operator.rshift)


_Leaf = Callable[[Any, Any], Any]


def _sorted_if_possible(items: list) -> list:
    # Equal sets can iterate in different orders (the order depends on the insertion history),
    # and code may iterate over a static set. Built from sorted elements, equal sets lay out,
    # and so iterate, alike.
    try:
        return sorted(items)
    except TypeError:
        return items


def freeze(obj: Any, leaf: _Leaf | None = None, path: Any = None) -> Any:
    """The hashable canonical form of a static value: lists and tuples become tuples (a
    NamedTuple keeps its class), dicts become [`FrozenDict`][]s, sets become frozensets and NumPy
    arrays and scalars become [`ReadOnlyArray`][]s, recursively. Everything else is passed to
    `leaf`.

    Nothing is copied when nothing changes, so freezing a frozen value returns it unchanged.

    **Arguments:**

    - `obj`: the value of a static field.
    - `leaf`: called as `leaf(x, path)` on every other value; by default the value is kept.
    - `path`: where `obj` is, passed on to `leaf` as `(path, index)`, `(path, (key,))` or
        `(path, "{...}")` for an element of a list, dict or set, so that `leaf` can name the
        place of a bad value (see `render_path` in `_stabilize.py`).

    **Returns:**

    The frozen value.
    """
    # The read-only views of a `StableModule`'s static values freeze as what they stand for.
    t = VIEW_BASES.get(type(obj), type(obj))
    if t is tuple or t is list:
        items = [freeze(x, leaf, (path, i)) for i, x in enumerate(obj)]
        if t is tuple and all(map(operator.is_, items, obj)):
            return obj
        return tuple(items)
    if t is dict or t is FrozenDict:
        values = {k: freeze(v, leaf, (path, (k,))) for k, v in obj.items()}
        if t is FrozenDict and all(values[k] is v for k, v in obj.items()):
            return obj
        return FrozenDict(values)
    if t is set or t is frozenset:
        items = [freeze(x, leaf, (path, "{...}")) for x in obj]
        if t is frozenset and all(map(operator.is_, items, obj)):
            return obj
        return frozenset(_sorted_if_possible(items))
    if t is np.ndarray or isinstance(obj, np.generic):
        # A NumPy scalar too: it is an array to Equinox, which warns about one in a static field.
        return ReadOnlyArray(obj) if leaf is None else leaf(ReadOnlyArray(obj), path)
    if issubclass(t, tuple) and hasattr(obj, "_make"):
        items = [freeze(x, leaf, (path, i)) for i, x in enumerate(obj)]
        if all(map(operator.is_, items, obj)):
            return obj
        return obj._make(items)
    return obj if leaf is None else leaf(obj, path)
