"""A leaf of a `StableModule`'s static value that `eqxstable.intern` may not substitute.

`intern` returns some objects unchanged although an equal one was seen before: an object of a
class with its own `__eq__`/`__hash__` (equal objects may each hold lists of their own), a
partial with keywords, a function with keyword-only defaults or attributes (each owns a dict that
can change in place). A module holding one keeps its own object, so its static value cannot be
the one canonical `Static` of its class (that would hand it another module's object). Its
`Static` is its own, and compares the leaf through a [`Delegate`][] as Equinox would compare
the value, so that a rebuilt module still hits the cache of plain `equinox.filter_jit`.
"""

import warnings
from typing import Any

import equinox as eqx
import numpy as np

from .._errors import StabilityWarning
from .._keys import stable_key, warns_hash_without_eq


# Ends the parts of a value holding a `Delegate` (see `Static.__eq__`).
DELEGATED = ("delegated",)


def delegated(parts: tuple) -> bool:
    return bool(parts) and parts[-1] is DELEGATED


class Delegate:
    """A leaf of a static value that `intern` may not substitute, as it stands in the parts of
    its `Static`: the module keeps its own object, and two modules' `Static`s compare it.

    - An object of a class with its own `__eq__` and `__hash__` (a user's config class): by
        that `==`, type-exactly, as Equinox compares a static field (so plain
        `equinox.filter_jit` hits a rebuilt module where it hits an `equinox.Module`).
    - Anything else (a partial with keywords, a function with keyword defaults or attributes:
        each owns a dict that can change in place): by its stable key now, which covers those
        dicts (so a program traced for the old keywords is never reused after they change).
    """

    __slots__ = ("obj", "own_eq")

    def __init__(self, obj: Any, own_eq: bool):
        self.obj = obj
        self.own_eq = own_eq

    def __hash__(self) -> int:
        obj = self.obj
        return hash((type(obj), hash(obj) if self.own_eq else leaf_key(obj)))

    def __eq__(self, other: object) -> bool:
        if type(other) is not Delegate:
            return False
        a, b = self.obj, other.obj
        if a is b:
            return True
        if type(a) is not type(b) or self.own_eq is not other.own_eq:
            return False
        if not self.own_eq:
            return leaf_key(a) == leaf_key(b)
        try:
            # A user `__eq__` may return an array or raise: only a plain `True` is equal.
            same = a == b
            return same if type(same) is bool else type(same) is np.bool_ and bool(same)
        except Exception:
            return False

    def __repr__(self) -> str:
        return f"Delegate({self.obj!r})"


def own_eq_class(t: type) -> bool:
    """Whether `t` defines its own `__eq__` and `__hash__` (not Equinox's, which compares the
    fields, nor `object`'s): the `==` Equinox compares a static value of that class by."""
    eq = getattr(t, "__eq__", None)
    hashed = getattr(t, "__hash__", None)
    return (
        eq is not object.__eq__
        and hashed is not None
        and hashed is not object.__hash__
        and not issubclass(t, eqx.Module)
    )


def leaf_key(x: Any) -> Any:
    if warns_hash_without_eq(type(x)):
        # The module layer has warned already, naming the field; `stable_key` would warn again
        # with the class alone.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StabilityWarning)
            return stable_key(x)
    return stable_key(x)
