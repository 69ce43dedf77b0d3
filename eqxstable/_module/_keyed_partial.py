"""A `functools.partial` with keywords in a regular field, made comparable by its key.

`intern` never substitutes a partial with keywords (its keywords dict can change in place, and
an equal twin elsewhere reads another dict), and `functools.partial`'s `==` is identity, so
plain `equinox.filter_jit`, which compares the non-array leaves of its arguments with `==`,
would retrace every rebuilt module holding one
(`activation=ft.partial(jax.nn.leaky_relu, negative_slope=0.1)`). A `KeyedPartial` is the same
partial (it shares the function, the arguments, the very keywords dict and the attribute dict of
the partial it was made from, so reading or changing one reads or changes the other), and it
compares equal to another exactly when both have the same stable key and neither has changed
since it was made: a program traced for one is never reused for a partial that changed after
(or before) that trace, as the contract's post-trace rule asks.
"""

import functools as ft
import weakref
from typing import Any

from .._keys import stable_key


class KeyedPartial(ft.partial):
    """The partial it was made from, compared by its stable key (see the module docstring).

    `isinstance(p, functools.partial)`, calling it, `.func`, `.args`, `.keywords`, `repr` and
    copies (which are plain partials) are the original's; only `type(p)` tells them apart. Its
    key is the original's but for its class: what it holds of its own (the original and that
    key) lives beside it (`_held`), not in slots, which `stable_key` would read as its state."""

    __slots__ = ()

    def _held(self) -> tuple[ft.partial, Any]:
        return _held[id(self)][1:]

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not KeyedPartial:
            return False
        source, k = self._held()
        other_source, other_k = other._held()
        return k == other_k and stable_key(source) == k and stable_key(other_source) == other_k

    def __hash__(self) -> int:
        return hash(self._held()[1])

    def __repr__(self) -> str:
        return repr(self._held()[0])

    def __reduce__(self) -> Any:
        # A copy or a pickle is a plain partial with the same state: `KeyedPartial` is only
        # how a stabilized module holds it.
        return self._held()[0].__reduce__()


# For each live `KeyedPartial`, by `id`: a weak reference to it (whose callback drops the row),
# the partial it was made from and that partial's key when it was made.
_held: dict[int, tuple[weakref.ref, ft.partial, Any]] = {}


def _forget(i: int, r: weakref.ref, held: dict = _held) -> None:
    row = held.get(i)
    if row is not None and row[0] is r:
        del held[i]


def keyed_partial(p: ft.partial) -> ft.partial:
    """`p` as a `KeyedPartial`, where it is exactly a `functools.partial` with keywords or
    attributes of its own (what `intern` returns unchanged); else `p` itself."""
    if type(p) is not ft.partial or not (p.keywords or p.__dict__):
        return p
    out = KeyedPartial(p.func)
    # `__setstate__` takes the keywords and attribute dicts themselves (not copies) when they
    # are exactly dicts: the two partials then read and change the same state.
    out.__setstate__((p.func, p.args, p.keywords, p.__dict__))  # pyright: ignore[reportAttributeAccessIssue]
    i = id(out)
    _held[i] = (weakref.ref(out, lambda r, i=i: _forget(i, r)), p, stable_key(p))
    return out
