"""What the walk of `stabilize` does with a value, by its type: a `Kind`, found once per type."""

import enum
from typing import Any

import equinox as eqx
import jax
import jax.tree_util as jtu
import numpy as np

from .._keys import warns_hash_without_eq
from .._keys._per_class import PerClass


class Kind(enum.Enum):
    ARRAY = enum.auto()
    NONE = enum.auto()  # `None`, `True` and `False`: singletons, their own canonical instance.
    INT = enum.auto()
    LIST = enum.auto()
    TUPLE = enum.auto()
    NAMEDTUPLE = enum.auto()
    DICT = enum.auto()
    MODULE = enum.auto()
    PARTIAL = enum.auto()
    NODE = enum.auto()
    LEAF = enum.auto()
    HASH_WITHOUT_EQ = enum.auto()


_kinds: PerClass[Kind] = PerClass()


def kind_of(obj: Any) -> Kind:
    t = type(obj)
    kind = _kinds.get(id(t))
    if kind is None:
        kind = _classify(obj)
        _kinds.put(t, kind)
    return kind


def _classify(obj: Any) -> Kind:
    # Depends on the type only (pytree registration is per type), so it is cached.
    t = type(obj)
    simple = {
        list: Kind.LIST,
        tuple: Kind.TUPLE,
        dict: Kind.DICT,
        type(None): Kind.NONE,
        bool: Kind.NONE,
        int: Kind.INT,
    }
    # By identity: a user's metaclass may call its class `list`.
    for c, kind in simple.items():
        if c is t:
            return kind
    if issubclass(t, (jax.Array, np.ndarray, np.generic)):
        return Kind.ARRAY
    if issubclass(t, eqx.Module):
        return Kind.MODULE
    if issubclass(t, jtu.Partial):
        return Kind.PARTIAL
    if issubclass(t, tuple) and hasattr(t, "_make") and hasattr(t, "_fields"):
        return Kind.NAMEDTUPLE
    try:
        treedef = jtu.tree_structure(obj, is_leaf=lambda x: x is not obj)
    except Exception:
        treedef = None  # A node type whose flatten fails on this value: left whole, as a leaf.
    if treedef is not None and not jtu.treedef_is_leaf(treedef):
        return Kind.NODE
    if _hash_without_eq(t):
        return Kind.HASH_WITHOUT_EQ
    return Kind.LEAF


def small_int(obj: int) -> bool:
    # CPython keeps one object per int in [-5, 256], so `intern` could only return that same
    # object: skipping it is exact, and saves a microsecond per size field.
    return -5 <= obj <= 256


def _hash_without_eq(t: type) -> bool:
    # Exactly the classes that `stable_key` warns about (it knows, e.g., that enum members are
    # singletons, with an identity `__eq__` that is right for them); the walk warns instead,
    # naming the field as well.
    return warns_hash_without_eq(t)
