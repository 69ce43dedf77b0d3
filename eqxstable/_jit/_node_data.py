"""The node data of a pytree structure (static fields of Equinox modules, dict keys, ...), as the
cache compares it: by identity one level down, since `PyTreeDef.__eq__` compares it with `==`."""

import operator
from typing import Any

from .._compat import flat_module_aux


_is = operator.is_


def node_data(treedef: Any, leaves: list) -> list:
    """The node data of every node of `treedef` that has some (static fields of Equinox modules,
    dict keys, ...). `PyTreeDef.__eq__` compares node data with `==`, which lets `1`, `1.0` and
    `True` collide; the cache compares them by identity, else by `stable_key`."""
    data: list = []
    append = data.append
    treedef.walk(lambda _, d: None if d is None else append(d), type, leaves)
    if flat_module_aux is not None:  # Equinox < 0.13.3: see `_compat.py`.
        return list(map(flat_module_aux, data))
    return data


def same_node_data(new: list, old: tuple) -> bool:
    # Node data is a fresh tuple (or list) per flatten, but the values in it are the same objects
    # call after call (an Equinox module's static fields), so identity one level down suffices.
    if len(new) != len(old):
        return False
    for a, b in zip(new, old):
        if a is not b and not (
            (type(a) is tuple or type(a) is list)
            and type(b) is type(a)
            and len(a) == len(b)
            and all(map(_is, a, b))
        ):
            return False
    return True


def needs_data_check(data: list) -> bool:
    # Strings are only ever `==` to strings, so node data made of lists of strings alone (the
    # keys of a `kwargs` dict) needs no further check once the treedefs compare equal.
    return not all(type(d) is list and all(type(k) is str for k in d) for d in data)
