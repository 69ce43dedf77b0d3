"""What each read-only form stands for (`VIEW_BASES`), and how JAX's pytrees and PyYAML see it:
as the kind of value that was assigned."""

import importlib.util
from collections.abc import Callable
from typing import Any

import jax.tree_util as jtu

from ._canonical import CanonicalDict, CanonicalFrozenSet, CanonicalList, CanonicalSet
from ._readonly import OrderedFrozenSet, ReadOnlyDict, ReadOnlyList, ReadOnlySet


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
