"""A leaf of a `StableModule`'s static value that `eqxstable.intern` may not substitute.

`intern` returns some objects unchanged although an equal one was seen before: an object of a
class with its own `__eq__`/`__hash__` (equal objects may each hold lists of their own), a
partial with keywords, a function with keyword-only defaults or attributes (each owns a dict that
can change in place). A module holding one keeps its own object, so its static value cannot be
the one canonical `Static` of its class (that would hand it another module's object). Its
`Static` is its own, and compares the leaf through a [`Delegate`][] as Equinox would compare
the value, so that a rebuilt module still hits the cache of plain `equinox.filter_jit`, and
(for a leaf compared by its key) by the key it had when the module was built, so that a program
traced before the user's object changed is never served to a fresh module with its new value.
"""

import warnings
from typing import Any

import equinox as eqx

from .._errors import StabilityWarning
from .._keys import compute, stable_key, warns_hash_without_eq, Watch
from .._keys._types import proven_equal


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
    - Anything else (a partial with keywords, a function with keyword defaults or attributes,
        a NumPy scalar holding attributes: each can change in place): by the key it had **when
        the `Delegate` was made**, and only while its object still has that key (`holds`).

    JAX's cache keeps the first module's treedef, so a `Delegate` in a cached entry stands for
    the program traced with its object as it was then. Its object may be the user's own, and
    changed since (`p.keywords["k"] = 3.0`, `f.scale = 3.0`, `f.__kwdefaults__["k"] = 3.0`, a
    cell rebound): comparing keys *now* would call the changed object equal to a fresh one
    built with the new value, and serve it the old program. So a `Delegate` is equal to
    another exactly when both were made with one key and both objects still have it; one whose
    object was seen without its key (by a comparison, or by a read of the field, which a trace
    makes: `_access.py`) is **changed** for good, equal to nothing but itself, even if its object
    is later changed back (the program traced in between may be the cached one). Its hash is
    that of the key it was made with, so equal `Delegate`s hash alike.

    **Not seen:** plain `equinox.filter_jit` called again with a module holding the very same
    `Static` (the module object it traced, or one copied from it by `eqx.tree_at`,
    `jax.tree.unflatten`) compares it by identity, as it compares an `equinox.Module`'s static
    partial, and runs the old program; `eqxstable.filter_jit` keys the object afresh.
    """

    __slots__ = ("obj", "own_eq", "key", "watch", "changed")

    def __init__(self, obj: Any, own_eq: bool):
        self.obj = obj
        self.own_eq = own_eq
        # Whether the object was seen without the key it was made with: for good.
        self.changed = False
        if own_eq:
            self.key = self.watch = None
        else:
            # The key now, and the cheap checks that say it still holds (`Watch`).
            self.key, self.watch = _key_and_watch(obj)

    def holds(self) -> bool:
        """Whether the object still has the key this `Delegate` was made with, and always had
        whenever it was looked at (an object with its own `==` is compared by it: always)."""
        if self.changed:
            return False
        watch = self.watch
        if watch is None or watch.valid():
            return True
        # Something it covers is another object now: the key decides (a value rebound to an
        # equal one keeps it).
        key, watch = _key_and_watch(self.obj)
        if key == self.key:
            self.watch = watch
            return True
        self.changed = True
        return False

    def __hash__(self) -> int:
        obj = self.obj
        return hash((type(obj), hash(obj) if self.own_eq else self.key))

    def __eq__(self, other: object) -> bool:
        if type(other) is not Delegate:
            return False
        if self is other:
            return True
        a, b = self.obj, other.obj
        if type(a) is not type(b) or self.own_eq is not other.own_eq:
            return False
        if not self.own_eq:
            # Made with one key, and both objects still have it.
            return self.key == other.key and self.holds() and other.holds()
        return a is b or proven_equal(a, b)

    def __repr__(self) -> str:
        return f"Delegate({self.obj!r})"


def check_delegates(parts: tuple) -> None:
    """A read of a field whose `Static` holds `Delegate`s (`_access.py`): each whose object no
    longer has the key it was made with is changed for good. A trace reads the field, so the
    program it makes is never served to a module equal to the object's old key."""
    for p in parts:
        if type(p) is Delegate:
            p.holds()


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


def _key_and_watch(x: Any) -> tuple[Any, Watch]:
    if warns_hash_without_eq(type(x)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StabilityWarning)
            return compute(x)
    return compute(x)
