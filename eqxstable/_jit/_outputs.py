"""A call's output: its array leaves come back from JAX, the rest rides in a `Mixed` node, and an
output leaf that was one of the call's own static inputs is the CURRENT call's object, not the
traced call's.

A program serves every call whose static parts have the same keys: `step(x, p2)` runs the program
traced with an equivalent `p1`. Equinox keys such objects by identity and traces `p2` again, so it
returns `p2`; the traced output holds `p1`. Equivalent is not interchangeable (a partial's
`keywords` is its own dict, a model's activation its own function), so the trace records which
non-array output leaves are, by identity, static input leaves (an argument's, or the function's
own), by position, and every call served by the program (a hit, a guest) puts back its own
objects at those positions.

Every other non-array output leaf that is not an immutable value (`shareable`: what is keyed by
value and cannot change, an `int`, a `str`, a dtype, a tuple of such) was made by the trace (a
`Log()`, a `set`), or reached through an input (`cfg.fn`): it is *made* (`Mixed.made`, its
positions). Equinox returns it to the calls that hit the trace that made it, which are those of
the very same function and static objects (it keys them by identity); a rebuilt function is
traced again and gets a fresh one. So an entry whose trace made one is pinned to the objects that
traced it (`Cache.pin`, as for a host callback), and another function's entry traces its own; a
trace that finds the program compiled for an equal trace (`_reuse.first_call`: the fingerprint
reads the made leaves' positions, not the objects) runs it and is served its own trace's objects
(`Entry.remap`).
"""

import threading
from typing import Any

import equinox as eqx
import jax.tree_util as jtu
import numpy as np

from .._keys._frozen import frozen_scalars
from .._keys._per_class import type_ids
from ._accounting import current


# Immutable builtin values: which object of a type-exact equal value is returned cannot matter
# (Equinox's hits return the traced one), and skipping them keeps their outputs off this path.
# By identity (`type_ids`): a user's metaclass may call its class `int`.
_VALUES = type_ids((int, float, complex, str, bytes, bool))
# The same, and what else may be shared between calls of equivalent functions (`shareable`).
_SHAREABLE = type_ids((int, float, complex, str, bytes, bool, type(None), type(Ellipsis)))


try:
    from jax._src.numpy.scalar_types import _ScalarMeta  # `jnp.float32`

    _SCALAR_TYPES: tuple = (_ScalarMeta,)
except ImportError:  # pragma: no cover - moved: such an output is served as made.
    _SCALAR_TYPES = ()


def shareable(x: Any) -> bool:
    """Whether an output leaf is an immutable value, which any call may share: a builtin scalar,
    a NumPy scalar, dtype or scalar type (`np.float32`, `jnp.float32`), or an exact tuple or
    frozenset of builtin scalars all the way down (`frozen_scalars`). Anything else may be
    written to by the caller who got it."""
    t = type(x)
    return (
        id(t) in _SHAREABLE
        or (isinstance(x, (np.dtype, np.generic, *_SCALAR_TYPES)) and not isinstance(x, np.void))
        or (isinstance(x, type) and issubclass(x, np.generic))
        or frozen_scalars(x)
    )


# Where the current call's objects are read from: `(entry.template, the function's template)`,
# set only while a `Lowered.compile()`'d program runs (`serving`); a wrapper's call is found
# through `current.call`.
_served = threading.local()

MSG_NO_CALL = (
    "`eqxstable.filter_jit`: an output that returns a static input was rebuilt outside the call "
    "that ran it; please report this."
)


class Mixed:
    """An output with non-array leaves. It is a pytree node whose children are the array leaves
    and whose node data is the rest, so it travels through `jax.jit`. JAX's unflattening of each
    call's result makes a `Mixed` again, and the caller (the wrapper, `Compiled`) turns it into
    the user's output with `rebuilt` while the call is still current.

    Why not rebuild the user's output inside JAX's unflattening: after a call that compiled, JAX
    flattens the output it returned once more (`pjit._get_fastpath_data`) and runs later calls
    on its C++ fast path only when every leaf it then finds is an array. A `Mixed` flattens to
    its arrays; the user's output (a module with its activation functions, `(x, 1.0)`) does not,
    so every hit would take JAX's Python dispatch path (attack 11b-02).

    `sources` holds `(output leaf, 0 or 1, input leaf)` for each output leaf that is a static
    input: of the call's flattened `(args, kwargs)` (0) or of the function (1). Its place in
    `template` is `None`, so the node data (which the reuse level fingerprints) holds positions,
    never the traced object. `made` holds the positions of the leaves the trace made (see the
    module's docstring): the template holds them, for the calls of the objects that traced it."""

    __slots__ = ("dynamic", "treedef", "template", "dyn_pos", "sources", "made")

    def __init__(self, dynamic, treedef, template, dyn_pos, sources=(), made=()):
        self.dynamic = dynamic
        self.treedef = treedef
        self.template = template
        self.dyn_pos = dyn_pos
        self.sources = sources
        self.made = made


def rebuilt(out: Any) -> Any:
    """The user's output: `out` itself unless it is a `Mixed`, whose arrays are then put back
    among its other leaves (and the current call's objects where its trace took its inputs').
    Called while the call that returned `out` is current (`current.call`, `serving`)."""
    if type(out) is not Mixed:
        return out
    template = out.template
    if out.made:
        # A guest runs another entry's program: its own trace made its own objects.
        remap = getattr(_entry(), "remap", None)
        if remap is not None and remap[0] is template:
            template = remap[1]
    leaves = list(template)
    for i, x in zip(out.dyn_pos, out.dynamic):
        leaves[i] = x
    if out.sources:
        put_back(leaves, out.sources)
    return out.treedef.unflatten(leaves)


def _entry() -> Any:
    """The entry of the call being served (`None` outside one)."""
    entry = getattr(_served, "entry", None)
    if entry is not None:
        return entry
    call = current.call
    return None if call is None else call.entry


def _flatten_mixed(m: Mixed) -> tuple:
    return m.dynamic, (m.treedef, m.template, m.dyn_pos, m.sources, m.made)


def _unflatten_mixed(spec: tuple, dynamic: Any) -> Mixed:
    return Mixed(dynamic, *spec)


jtu.register_pytree_node(Mixed, _flatten_mixed, _unflatten_mixed)


def put_back(leaves: list, sources: tuple) -> None:
    """The current call's objects at the output positions its trace took from its inputs: its
    own arguments' leaves, and its wrapper's function's."""
    inputs = getattr(_served, "inputs", None)
    if inputs is None:
        call = current.call
        if call is None:
            raise RuntimeError(MSG_NO_CALL)
        # The call's own leaves, flattened again: its entry holds the objects of the latest
        # call to match it, which in another thread may be another call's.
        inputs = (jtu.tree_leaves((call.args, call.kwargs)), call.wrapper._fun_template)
    for out_pos, kind, in_pos in sources:
        leaves[out_pos] = inputs[kind][in_pos]


class serving:
    """`with serving(entry, fun_template):` around a call of a compiled program outside a
    wrapper's call (`Lowered.compile()`): the objects its output takes from the inputs."""

    def __init__(self, entry: Any, fun_template: tuple):
        self.entry = entry
        self.inputs = (entry.template, fun_template)

    def __enter__(self) -> None:
        self.previous = (getattr(_served, "inputs", None), getattr(_served, "entry", None))
        _served.inputs = self.inputs
        _served.entry = self.entry

    def __exit__(self, *exc: Any) -> None:
        _served.inputs, _served.entry = self.previous


def split_output(out: Any, call_template: Any = (), fun_template: Any = ()) -> Any:
    """`out` itself when all its leaves are arrays (the usual case: JAX then rebuilds it with no
    Python of ours in the way), else a `Mixed`.

    **Arguments:**

    - `out`: what the traced function returned.
    - `call_template`, `fun_template`: the static leaves the trace called it with (`None` for
      each array): of `(args, kwargs)` (an `Entry`'s template) and of the function.

    **Returns:** `out`, or a `Mixed` that rebuilds it.
    """
    leaves, treedef = jtu.tree_flatten(out)
    mask = [eqx.is_array(x) for x in leaves]
    if all(mask):
        return out
    dynamic = [x for x, m in zip(leaves, mask) if m]
    template = [None if m else x for x, m in zip(leaves, mask)]
    sources = _sources(leaves, mask, call_template, fun_template)
    for out_pos, _, _ in sources:
        template[out_pos] = None
    taken = {out_pos for out_pos, _, _ in sources}
    made = tuple(
        i
        for i, (x, m) in enumerate(zip(leaves, mask))
        if not m and i not in taken and not shareable(x)
    )
    return Mixed(
        dynamic,
        treedef,
        tuple(template),
        tuple(i for i, m in enumerate(mask) if m),
        sources,
        made,
    )


def _spec(out_tree: Any) -> tuple | None:
    """The node data of a traced output's root `Mixed`, or `None`."""
    try:
        node = out_tree.node_data()
    except Exception:
        return None
    if node is None or node[0] is not Mixed:
        return None
    return node[1]


def made_template(out_tree: Any) -> tuple | None:
    """The template of a traced output (`Traced.out_tree`) whose trace made objects (see the
    module's docstring), else `None`."""
    spec = _spec(out_tree)
    if spec is None or not spec[4]:
        return None
    return spec[1]


def shape_of(out_tree: Any) -> Any:
    """A traced output's tree with `None` in place of the objects its trace made: what another
    trace must match to run its program (each call gets its own trace's objects there)."""
    spec = _spec(out_tree)
    if spec is None or not spec[4]:
        return out_tree
    treedef, template, dyn_pos, sources, made = spec
    template = list(template)
    for i in made:
        template[i] = None
    mixed = jtu.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
    shaped = Mixed(mixed.dynamic, treedef, tuple(template), dyn_pos, sources, made)
    return jtu.tree_structure(shaped)


def _sources(leaves: list, mask: list, call_template: Any, fun_template: Any) -> tuple:
    """`(output leaf, 0 or 1, input leaf)` for each non-array output leaf that is one of the
    inputs' static leaves, by identity (the first place it is found, the call's first)."""
    candidates = [
        i for i, (x, m) in enumerate(zip(leaves, mask)) if not m and id(type(x)) not in _VALUES
    ]
    if not candidates:
        return ()
    where: dict[int, tuple[int, int]] = {}
    for kind, template in enumerate((call_template, fun_template)):
        for in_pos, x in enumerate(template):
            if x is not None:
                where.setdefault(id(x), (kind, in_pos))
    # The ids are those of live objects: the templates hold them.
    return tuple((i, *where[id(leaves[i])]) for i in candidates if id(leaves[i]) in where)
