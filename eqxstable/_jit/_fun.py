"""The jitted function split in two, as `equinox.filter_jit` splits it: its arrays, traced like
those of any argument (so a new module with new weights needs no new program), and its static
part, which is what a program is compiled for and what it is keyed by.
"""

from typing import Any, NamedTuple

import equinox as eqx
import jax.tree_util as jtu

from .._keys import Key, stable_key, too_many_objects
from ._ambient import ambient
from ._node_data import node_data


class FunParts(NamedTuple):
    """`fun` flattened: `treedef`; `mask` (which leaves are arrays); `template` (the leaves with
    `None` for each array); `dynamic` (the arrays, in order)."""

    treedef: Any
    mask: tuple[bool, ...]
    template: tuple
    dynamic: tuple

    def rebuild(self, dynamic: Any) -> Any:
        """The function with these arrays in place of its own."""
        leaves = list(self.template)
        for i, x in zip((i for i, m in enumerate(self.mask) if m), dynamic):
            leaves[i] = x
        return self.treedef.unflatten(leaves)


def split_fun(fun: Any) -> FunParts:
    leaves, treedef = jtu.tree_flatten(fun)
    mask = tuple(map(eqx.is_array, leaves))
    template = tuple(None if m else x for x, m in zip(leaves, mask))
    dynamic = tuple(x for x, m in zip(leaves, mask) if m)
    return FunParts(treedef, mask, template, dynamic)


def static_key(fun: Any, parts: FunParts, donated_args: str, jitkwargs: tuple) -> Any:
    """The key of what a program is compiled for: the function without its arrays, keyed by
    [`eqxstable.stable_key`][] (so a rebuilt lambda, or a module holding one, finds the program),
    and the options. The tree structure is part of it: an array and an empty field (`None`)
    leave the same static part but take different arguments."""
    if any(parts.mask):
        try:
            # The function rebuilt with `None` for its arrays is keyed as a whole, so that its
            # handler applies (an Equinox module's dict fields are keyed by their contents).
            static = parts.treedef.unflatten(parts.template)
        except Exception:
            # A list in the node data is keyed by identity and contents: a miss at worst.
            static = (parts.template, tuple(node_data(parts.treedef, list(parts.template))))
    else:
        static = fun
    # The function keyed on its own (the same function keeps its key through the memo, also where
    # it reads state no key sees: a new wrapper of it finds its program, as under Equinox), the
    # rest beside it; one key, equal to nothing where either part is (`too_many_objects`).
    fun_key = stable_key(static)
    rest = stable_key((parts.treedef, donated_args, jitkwargs))
    for part in (fun_key, rest):
        if too_many_objects(part):
            return part
    return Key(
        (fun_key.parts, rest.parts),
        fun_key.identity or rest.identity,
        fun_key.substitutable and rest.substitutable,
    )


def program_key(fun: Any, parts: FunParts, donated_args: str, jitkwargs: tuple) -> Any:
    """The key a program is kept and shared under (`_sharing.py`): `static_key`, and the ambient
    state a trace reads (`_ambient.py`), so that an equivalent function keyed anew under another
    NumPy error state or warning filters is traced again, as `equinox.filter_jit` traces it."""
    return (static_key(fun, parts, donated_args, jitkwargs), ambient())
