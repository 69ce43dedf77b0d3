"""Per-call signatures: what one call looked like, in the user's terms, for explaining a miss.

A `Signature` records, for one call, every leaf (path, and either the array's shape, dtype, weak
type and sharding or the static value's stable key) and every pytree node (path, type, node data,
and an Equinox module's static fields). `_explain.py` compares it with the signatures of earlier
misses.

This runs only on a miss, so it favours clear output over speed. It knows nothing about jit and
is part of the internal API the tools (`eqxstable doctor`) build on.
"""

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.tree_util as jtu
import numpy as np
from jax.core import Tracer

from .._keys import compute_node_data, stable_key
from .._keys._per_class import type_ids
from .._module import Static, VIEW_BASES
from ._ambient import ambient
from ._config import NAMES, untraced
from ._gc import collector_paused


_MAX_REPR = 60


class _Placement(NamedTuple):
    sharding: Any
    committed: bool

    def __str__(self) -> str:
        return f"{self.sharding}" + ("" if self.committed else " (uncommitted)")


class ArrayLeaf(NamedTuple):
    shape: tuple[int, ...]
    dtype: Any
    weak_type: bool
    sharding: Any


class StaticLeaf(NamedTuple):
    key: Any
    type: type
    text: str


class Node(NamedTuple):
    """One pytree node: its type, a type-exact key of its node data, and (Equinox modules) the
    static fields by name, as `{name: StaticLeaf}`."""

    type: type
    data_key: Any
    data_text: str
    fields: dict[str, StaticLeaf] | None


@dataclasses.dataclass(frozen=True)
class Signature:
    """What one call looked like, leaf by leaf and node by node (paths in the user's terms)."""

    leaves: tuple[tuple[str, ArrayLeaf | StaticLeaf], ...]
    nodes: tuple[tuple[str, Node], ...]
    # `(path, earlier path)` for each static object that is the very object met earlier in the
    # call (`f(g, g)`): a trace can tell, so the cache keys it (`_cache._aliases`).
    aliases: tuple[tuple[str, str], ...] = ()
    # `(name, value)` of each JAX configuration state a trace reads (`config()`).
    config: tuple[tuple[str, Any], ...] = ()
    # The ambient state a trace reads (`_ambient.ambient()`: NumPy's error state and print
    # options, the warning filters), which a call's new objects are keyed with.
    ambient: Any = None


def argument_path(keypath: Sequence[Any]) -> str:
    """Renders a key path into `(args, kwargs)` as `args[0].mlp.activation` / `kwargs['x']`."""
    if not keypath:
        return "(args, kwargs)"
    head, rest = keypath[0], tuple(keypath[1:])
    name = "args" if getattr(head, "idx", None) == 0 else "kwargs"
    return name + jtu.keystr(rest)


def short_repr(obj: Any) -> str:
    try:
        text = repr(obj)
    except Exception:
        text = f"<{type(obj).__name__}>"
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def _static_leaf(obj: Any) -> StaticLeaf:
    if type(obj) is Static:
        # A `StableModule`'s static field: described, and keyed, by the value its code reads (as
        # frozen once, by `freeze_static`). Not by the `Static`: its key names the canonical
        # object, so a module built over a function after one of its captured variables was
        # rebound (another `Static` for the same function) would differ by identity alone, and
        # the miss would blame a new object instead of naming the variable (`tests/
        # test_module_static.py`). Nor by freezing the value again into its plain-module form:
        # a read-only array's key is its bytes, that form's is its identity.
        value = obj.value
        shown = VIEW_BASES.get(type(value), type(value))
        return StaticLeaf(stable_key(value), shown, short_repr(value))
    return StaticLeaf(stable_key(obj), type(obj), short_repr(obj))


def _aval(x: Any) -> Any:
    """JAX's own abstract value of `x`: shape, dtype (extended dtypes such as typed PRNG keys
    and `float0` included, which `np.dtype` cannot interpret) and weak type."""
    typeof = getattr(jax, "typeof", None)  # New in JAX 0.4.38; `get_aval` before.
    if typeof is not None:
        return typeof(x)
    return jax.core.get_aval(x)  # pyright: ignore[reportAttributeAccessIssue]


def array_leaf(x: Any) -> ArrayLeaf:
    try:
        aval = _aval(x)
    except TypeError:
        # A NumPy array JAX has no type for (`dtype=object`): described, if not traceable.
        aval = np.asarray(x)
    sharding = None
    if isinstance(x, jax.Array) and not isinstance(x, Tracer):
        sharding = _Placement(x.sharding, getattr(x, "committed", True))
    weak = getattr(aval, "weak_type", False)
    return ArrayLeaf(tuple(aval.shape), aval.dtype, bool(weak), sharding)  # pyright: ignore


def _node(x: Any, treedef: Any) -> Node:
    node_type, data = treedef.node_data()
    # Keyed by the rule the cache keys node data by (`_cache._key`): a node's data is rebuilt by
    # every flatten (a dict's keys come as a fresh list, a custom node may return a new dict or
    # dataclass), so it is keyed by its contents, and two signatures differ in a node exactly
    # where the cache's keys do.
    data_key, _ = compute_node_data(data)
    fields = None
    if isinstance(x, eqx.Module):
        # The stored value, as JAX sees it, rather than what an attribute read gives.
        stored = x.__dict__
        fields = {
            f.name: _static_leaf(stored[f.name] if f.name in stored else getattr(x, f.name, None))
            for f in dataclasses.fields(x)
            if f.metadata.get("static", False)
        }
    return Node(node_type, data_key, short_repr(data), fields)


# Leaves JAX never flattens further, which are never arrays (`eqx.is_array` is false): a child of
# one of these types is described in place, without a flatten of its own (a vocabulary of
# 50,000 pairs is 100,000 of them). Not `None`: it is a node without children.
_SCALAR_LEAVES = type_ids((int, float, complex, str, bytes, bool))
# `keystr` of each index met so far (`[0]`, `[1]`, ...).
_INDEX: list[str] = []


def _index(i: int) -> str:
    while len(_INDEX) <= i:
        _INDEX.append(jtu.keystr((jtu.SequenceKey(len(_INDEX)),)))
    return _INDEX[i]


def _walk(x: Any, path: str, top: bool, leaves: list, nodes: list, objects: list) -> None:
    """Describes `x`, found at `path` (`argument_path` of its key path), and what it holds, each
    node before its children. A child's path is its parent's followed by the keys that lead to it
    (`keystr` joins them), so each is rendered once, not once per level."""
    if id(type(x)) in _SEQUENCES and not top:
        # An exact tuple or list, whose flatten JAX fixes: its items, at `SequenceKey(i)`, and no
        # node data. Walked here without a flatten of one level and a call per item.
        nodes.append((path, Node(type(x), _no_data_key(), short_repr(None), None)))
        for i, child in enumerate(x):
            if id(type(child)) in _SCALAR_LEAVES:
                leaves.append((path + _index(i), _static_leaf(child)))
            else:
                _walk(child, path + _index(i), False, leaves, nodes, objects)
        return
    children, treedef = jtu.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        if eqx.is_array(x):
            leaves.append((path, array_leaf(x)))
        else:
            leaves.append((path, _static_leaf(x)))
            objects.append((path, x))
        return
    node = _node(x, treedef)
    nodes.append((path, node))
    if node.fields is not None:
        stored = x.__dict__
        objects.extend((f"{path}.{name}", stored.get(name)) for name in node.fields)
    for child_keys, child in children:
        child_keys = tuple(child_keys)
        child_path = argument_path(child_keys) if top else path + jtu.keystr(child_keys)
        if id(type(child)) in _SCALAR_LEAVES:
            # Never the same object as another static in a way a trace can tell (`_aliases`).
            leaves.append((child_path, _static_leaf(child)))
        else:
            _walk(child, child_path, False, leaves, nodes, objects)


_SEQUENCES = type_ids((tuple, list))


def _no_data_key() -> Any:
    # The key `_node` gives a tuple's or a list's node data (`None`).
    return compute_node_data(None)[0]


def signature(args: tuple, kwargs: dict) -> Signature:
    """The signature of one call `f(*args, **kwargs)`, as the stable `filter_jit` sees it: JAX
    and NumPy arrays are traced leaves, everything else is static.

    **Arguments:**

    - `args`, `kwargs`: the call's arguments.

    **Returns:**

    A `Signature`, to be given to [`diff`][].
    """
    leaves: list = []
    nodes: list = []
    objects: list = []
    with collector_paused():
        _walk((args, kwargs), argument_path(()), True, leaves, nodes, objects)
    return Signature(tuple(leaves), tuple(nodes), _aliases(objects), config(), ambient())


def with_function_arrays(sig: Signature, arrays: Iterable[tuple[Any, Any]]) -> Signature:
    """`sig` with the function's own arrays added as leaves: they are arguments of the program
    too, so a new shape there is a miss like one in the arguments.

    **Arguments:**

    - `sig`: a call's `signature` of its bound arguments.
    - `arrays`: `(key path, array)` of each of the function's own arrays, in flattening order.

    **Returns:**

    The signature with a leaf `fun<path>` (e.g. `fun.weight`) per array.
    """
    leaves = tuple((f"fun{jtu.keystr(tuple(path))}", array_leaf(x)) for path, x in arrays)
    return dataclasses.replace(sig, leaves=sig.leaves + leaves) if leaves else sig


def field_path(obj: Any, args: tuple, kwargs: dict) -> str:
    """The path of the static field of an Equinox module in a call that holds `obj` itself
    (`args[0].cb`), as `signature` names it; `""` if none does. Only on a miss."""
    pending: list = [(argument_path(()), (args, kwargs), True)]
    with collector_paused():
        while pending:
            path, x, top = pending.pop()
            if isinstance(x, eqx.Module):
                stored = x.__dict__
                for f in dataclasses.fields(x):
                    if f.metadata.get("static", False) and stored.get(f.name) is obj:
                        return f"{path}.{f.name}"
            children, treedef = jtu.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
            if treedef.num_nodes == 1 and treedef.num_leaves == 1:
                continue
            for child_keys, child in reversed(children):
                child_keys = tuple(child_keys)
                child_path = argument_path(child_keys) if top else path + jtu.keystr(child_keys)
                pending.append((child_path, child, False))
    return ""


def config() -> tuple[tuple[str, Any], ...]:
    """The JAX configuration a trace reads, by name: JAX's trace context (what JAX keys its own
    caches by: x64, matmul precision, promotion rules, the default device, ...) and the states
    it leaves out (`_config.NAMES`). Unnamed (`#i`) where this JAX does not name them."""
    try:
        from jax._src import config as jax_config

        values = tuple(jax_config.trace_context())
        named: Any = getattr(jax_config, "trace_context_names", None)
        if callable(named):
            named = named()
        names: tuple = tuple(named or ())
    except Exception:  # pragma: no cover - moved: a miss is then explained without it.
        return ()
    if len(names) != len(values):
        names = tuple(f"#{i}" for i in range(len(values)))
    return tuple(zip(names + NAMES, values + tuple(untraced())))  # pyright: ignore


# Values whose identity means nothing (as in `_cache._aliases`).
_NO_IDENTITY = type_ids((int, float, complex, str, bytes, bool, type(None), type(Ellipsis)))


def _aliases(objects: list) -> tuple[tuple[str, str], ...]:
    first: dict[int, str] = {}
    found = []
    for path, x in objects:
        if id(type(x)) in _NO_IDENTITY:
            continue
        earlier = first.setdefault(id(x), path)
        if earlier != path:
            found.append((path, earlier))
    return tuple(found)
