"""The modules that a walk of `stabilize` has returned with every leaf canonical, held weakly."""

import weakref
from typing import Any

from .._caches import cache_clears


# Modules that a walk has returned, all of whose leaves were canonical then. Returning such a
# module unchanged is always correct (it is equivalent to itself), so a later walk stops there,
# which makes `stabilize` of a stable tree, and a `StableModule` holding one, cheap. Held weakly.
_known: dict[int, weakref.ref] = {}


def _forget(i: int, ref: weakref.ref, _known: dict = _known) -> None:
    # `_known` is bound when the function is defined: at interpreter exit, a weak reference may
    # call this after the module's globals were cleared.
    if _known.get(i) is ref:
        del _known[i]


def is_known(m: Any) -> bool:
    ref = _known.get(id(m))
    return ref is not None and ref() is m


def mark_known(m: Any) -> None:
    """Records that every leaf of the module `m` is canonical."""
    i = id(m)
    try:
        _known[i] = weakref.ref(m, lambda r, i=i, forget=_forget: forget(i, r))
    except TypeError:
        pass


cache_clears.append(_known.clear)
