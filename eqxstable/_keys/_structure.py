"""Pytree structures as the jit cache keys them: the user's classes among the node types (their
methods run in the trace, so their namespaces are keyed like any class a function reads), node
data by value, and a comparison of two structures that never raises.

`PyTreeDef.__eq__` compares node data with `==`, which raises for a NumPy array or a user
object whose `__eq__` raises or returns an array. The cache keys node data by `stable_key`
itself, so where `==` raises it compares the structures alone: node types and arities.
"""

from typing import Any

from jax._src import tree_util as _tree_util

from ._origin import library_class


# JAX's table of registered node types (private: `tests/test_keys_node_registry.py` checks
# that it is there).
_REGISTRY: dict = _tree_util._registry  # pyright: ignore


def walk(treedef: Any) -> tuple[tuple[Any, ...], list, tuple]:
    """The node types of `treedef` defined in the user's code (an `eqx.Module` subclass, a
    registered dataclass) and the flatten and unflatten registered for each, the node data of
    every node that has some, in a fixed order, and its shape without node data: each node's
    type and arity, a leaf as `None`, in the same order.

    A `dict` node's data is the list of its keys, made afresh by each flatten and never
    changed: it is given as a tuple, keyed by value with nothing to watch. Any other list in
    node data may be the user's own (a custom node's aux data, a static field), changed in
    place later: it stays a list, keyed by value and watched."""
    # By identity: a user's metaclass may call two of its classes equal (by name, say).
    found: dict[int, Any] = {}
    data: list = []
    shape: list = []
    pending = [treedef]
    while pending:
        node = pending.pop()
        node_data = node.node_data()
        if node_data is None:
            shape.append(None)  # A leaf.
            continue
        t, d = node_data
        if d is not None:
            data.append(tuple(d) if t is dict and type(d) is list else d)
        if id(t) not in found and isinstance(t, type) and not library_class(t):
            found[id(t)] = t
            # Its registered flatten and unflatten run in the trace too (the argument is
            # rebuilt there): keyed beside the class, so the globals they read are followed.
            for f in _registered(t):
                found[id(f)] = f
        children = node.children()
        shape.append((t, len(children)))
        pending.extend(children)
    return tuple(found.values()), data, tuple(shape)


def _registered(t: type) -> tuple:
    """The functions JAX's pytree registry holds for the node type `t` (`to_iter`, `from_iter`):
    not in the class's namespace, yet run by every flatten and unflatten of its instances."""
    entry = registry_entry(t)
    if entry is None:
        return ()
    return (entry.to_iter, entry.from_iter)


def registry_entry(t: type) -> Any:
    """JAX's registry entry for exactly the class `t` (JAX's own lookup is by identity), or
    `None`. A `dict` lookup compares by `==`: a metaclass with an `==` of its own may call `t`
    equal to another registered class, whose entry is then found by identity among them all."""
    meta = type(t)
    if meta is type or (meta.__eq__ is type.__eq__ and meta.__hash__ is type.__hash__):
        return _REGISTRY.get(t)
    return next((v for k, v in _REGISTRY.items() if k is t), None)


def _shape(treedef: Any) -> Any:
    data = treedef.node_data()
    if data is None:
        return None
    return (data[0], tuple([_shape(c) for c in treedef.children()]))


def same_structure(a: Any, b: Any) -> bool:
    """`a == b` for two `PyTreeDef`s, except that node data whose `==` raises is left out of the
    comparison (node types and arities only); the caller compares node data itself."""
    try:
        return bool(a == b)
    except Exception:
        return _shape(a) == _shape(b)


class Structure:
    """A `PyTreeDef` in a dict key, hashed and compared by its shape alone: node types and arities.
    Its node data is keyed beside it by `stable_key` (`compute_node_data`): `PyTreeDef`'s own `==`
    and hash would compare a static field's rebuilt lambda by identity, so an equivalent rebuilt
    module would never find its program."""

    __slots__ = ("treedef", "shape", "_hash")

    def __init__(self, treedef: Any, shape: tuple):
        self.treedef = treedef
        self.shape = shape
        self._hash = hash(shape)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if type(other) is not Structure:
            return NotImplemented
        return self._hash == other._hash and self.shape == other.shape

    def __repr__(self) -> str:
        return f"Structure({self.treedef!r})"
