"""What a `StableModule`'s code reads of a static list or dict: a plain `list` or `dict`.

JAX takes a pytree node's kind from its exact type, so no subclass of `list` or `dict` is a list
or a dict to `jax.tree.map(f, self.widths, [1, 1])`, `jax.tree.structure(...) == ...` or
`eqx.tree_equal`, nor to `type(v) is list`. So the field's descriptor hands out a plain copy of
the containers (the leaves are shared: they are canonical, and immutable or watched), made from
the read-only form that the `Static` keeps: one per module object and field, which every later
read checks (`_handed.py`), so that a change to it raises rather than being lost. The canonical
value itself is never handed out, so nothing the module's code does to what it reads can change
the value that JAX compares and that other modules share.

A NumPy array is handed out as a read-only view of the module's own over the shared array's
memory (`_arrays.own_view`): NumPy lets `a.shape = ...` and `a.dtype = ...` change even a
read-only array, and that must change no other module's value. A set stays a `ReadOnlySet` (a set
is a leaf to JAX either way, and a plain set could iterate in another order than the original
did), a copy of the module's own: C code (`set.add(s, x)`) writes past its read-only methods,
and must change no other module's set (the next read raises, `_handed.py`).
"""

import functools as ft
from collections.abc import Callable
from typing import Any

import numpy as np

from ._arrays import own_view
from ._readonly import ReadOnlyDict, ReadOnlyList, ReadOnlySet


# Deeper than this, the walk that freezes a static value keeps the rest as one leaf (`_freezer.py`
# uses this very limit), so no read-only form lies deeper, and reads stop there too.
MAX_DEPTH = 64


def reader(value: Any) -> Callable[[], Any] | None:
    """How a read makes its copy of `value` (a frozen static value), decided once, when its
    `Static` is made: `None` where nothing needs copying (the value is read as it is), a C-fast
    `list`/`dict` copy for a flat list or dict (the usual static value), else a walk."""
    if _walk(value, {}, 0) is value:
        return None
    t = type(value)
    if t is ReadOnlyList and not any(map(_deep, value)):
        return ft.partial(list, value)
    if t is ReadOnlyDict and not any(map(_deep, dict.values(value))):
        return ft.partial(dict, value)
    return ft.partial(plain, value)


def _deep(x: Any) -> bool:
    return isinstance(x, (ReadOnlyList, ReadOnlyDict, ReadOnlySet, tuple, np.ndarray))


def plain(value: Any) -> Any:
    """`value` with every `ReadOnlyList`/`ReadOnlyDict` in it (inside lists, dicts, tuples and
    NamedTuples) replaced by a plain `list`/`dict`; one met twice is one copy, twice."""
    return _walk(value, {}, 0)


def _walk(value: Any, memo: dict[int, Any], depth: int) -> Any:
    if depth > MAX_DEPTH:
        return value
    depth += 1
    t = type(value)
    if t is ReadOnlyList or t is ReadOnlyDict:
        i = id(value)
        out = memo.get(i)
        if out is None:
            if t is ReadOnlyList:
                out = memo[i] = []
                out.extend([_walk(x, memo, depth) for x in value])
            else:
                out = memo[i] = {}
                out.update({k: _walk(v, memo, depth) for k, v in dict.items(value)})
        return out
    if t is np.ndarray:
        # The shared read-only array, as a view of this module's own (`_arrays.own_view`).
        return own_view(value)
    if t is ReadOnlySet:
        i = id(value)
        out = memo.get(i)
        if out is None:
            # Its table copied from the frozen one (`set.__init__` of a set), its order kept.
            out = memo[i] = ReadOnlySet.__new__(ReadOnlySet)
            set.__init__(out, value)
            out._order = value._order
        return out
    if isinstance(value, tuple) and (t is tuple or hasattr(value, "_make")):
        items = [_walk(x, memo, depth) for x in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return tuple(items) if t is tuple else value._make(items)  # pyright: ignore[reportAttributeAccessIssue]
    return value
