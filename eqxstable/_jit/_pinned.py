"""Programs that call back into Python while they run serve only the objects that traced them.

A host callback (`jax.pure_callback`, `jax.experimental.io_callback`, `jax.debug.callback`, a
`jax.debug.print` of a Python object) is compiled into the program as the very object the trace
met, and the program calls that object, with whatever state it has then, every time it runs. Two
equivalent objects (the same code, equal attributes) are interchangeable while a trace reads them,
not while a program runs: once one of them changes (`cb1.scale = 5`), or the callback changes its
own state (`cb.calls += 1`), a program traced with the first would compute, or write, what only the
first holds for calls that pass the second. So an entry whose trace holds such a callback is
*pinned* (`Cache.pin`): it serves only calls whose static leaves, node data and function are the
very objects it traced, with nothing its key reads rebound since (a failed watch drops it, even
when the key is equal again), and its program is never reused for another entry's trace
(`_reuse.first_call`). A call with equivalent objects traces and compiles its own, as
`equinox.filter_jit` does, which keys callables by identity.

Which equations run Python at run time is decided by an allowlist of what is known not to:
JAX's callback primitives always do, except Equinox's own `error_if` checks over the messages
their trace made (equal messages raise the same error); a `debug_print` does when it formats
anything but plain
values (an object's `__str__` runs then); any other equation does when one of its parameters holds
a callable that is neither JAX's own nor known to be read only while tracing or lowering (the
rules of custom derivatives, `_fingerprint.TRACE_ONLY`, and the static parts of Equinox's
`filter_primitive`s, which lowering traces). Sub-jaxprs are looked into.
"""

import operator
from types import BuiltinFunctionType, FunctionType
from typing import Any

import equinox as eqx
from jax.extend import core as jcore

from .._keys._origin import library_class
from .._keys._per_class import type_ids
from ._fingerprint import TRACE_ONLY
from ._node_data import node_data, same_node_data
from ._signature import short_repr


# Primitives whose `callback` parameter is called while the program runs.
_CALLBACKS = frozenset({"pure_callback", "io_callback", "debug_callback"})
# Values whose formatting at run time reads nothing that can change.
# By identity (`type_ids`): a user's metaclass may call its class `int` (or a node type `list`).
_PLAIN = type_ids((str, int, float, bool, complex, bytes, type(None)))
_NODES = type_ids((tuple, list, dict))
_NODES_OR_NONE = type_ids((tuple, list, dict, type(None)))
_TreeDef = type(__import__("jax").tree_util.tree_structure(0))


def runs_python(jaxpr: Any) -> bool:
    """Whether a (closed) jaxpr, or one inside it, holds an equation that calls Python objects
    while the compiled program runs (see the module's docstring). When unsure, `True`: the entry
    is then pinned, which costs a trace for an equivalent object, never a wrong answer."""
    if isinstance(jaxpr, jcore.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    try:
        return _runs_python(jaxpr, set())
    except Exception:
        return True


def _runs_python(jaxpr: Any, seen: set) -> bool:
    if id(jaxpr) in seen:
        return False
    seen.add(id(jaxpr))
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        params = eqn.params
        if name in _CALLBACKS and not _equinox_check(params.get("callback")):
            return True
        if name == "debug_print":
            if not all(_plain(v) for v in params.values()):
                return True
        elif name not in _CALLBACKS and not _filter_primitive(params):
            for param, value in params.items():
                if (name, param) not in TRACE_ONLY and _holds_callable(value):
                    return True
        if any(_runs_python(sub, seen) for sub in _jaxprs(params.values())):
            return True
    return False


def _jaxprs(values: Any) -> Any:
    """The jaxprs held by equation parameters, through any tuple (`custom_linear_solve` holds
    its jaxprs in a NamedTuple), list or dict."""
    for value in values:
        if isinstance(value, jcore.ClosedJaxpr):
            yield value.jaxpr
        elif isinstance(value, jcore.Jaxpr):
            yield value
        elif isinstance(value, (tuple, list)):
            yield from _jaxprs(value)
        elif isinstance(value, dict):
            yield from _jaxprs(value.values())


# Equinox's own callbacks of an `equinox.error_if` check (`equinox._errors._error`): `raises`,
# and `tpu_msg` after it. Each reads only what its trace made: the messages and the stack of
# the trace (lists of strings, and the `bytes` id of the calling `filter_jit`), which the check
# records and raises with; its result is the error or the argument itself.
_EQUINOX_CHECKS = frozenset({"_error.<locals>.raises", "_error.<locals>.tpu_msg"})
_EQUINOX_CELLS = frozenset({"msgs", "stack"})


def _equinox_check(callback: Any) -> bool:
    """Whether a callback is one of Equinox's runtime checks over plain messages: running the
    check of another trace over equal messages raises the same error (its stack, shown under the
    message, is the other trace's)."""
    fn = getattr(callback, "callback_func", None)
    if type(callback).__name__ != "_FlatCallback" or type(fn) is not FunctionType:
        return False
    try:
        import equinox._errors as errors
    except ImportError:  # pragma: no cover - moved: its checks are pinned.
        return False
    code = fn.__code__
    return (
        fn.__qualname__ in _EQUINOX_CHECKS
        and code.co_filename == errors.__file__
        and fn.__module__ == errors.__name__
        and not fn.__dict__
        and fn.__defaults__ is None
        and fn.__kwdefaults__ is None
        and set(code.co_freevars) <= _EQUINOX_CELLS
        and all(_messages(cell.cell_contents) for cell in fn.__closure__ or ())
        and (
            _plain(callback.in_tree)
            or (fn.__qualname__ == _TPU_MSG and _rebuilt_by_libraries(callback.in_tree))
        )
    )


_TPU_MSG = "_error.<locals>.tpu_msg"


def _rebuilt_by_libraries(treedef: Any) -> bool:
    """Whether unflattening `treedef` and mapping over its arrays runs only library code, which
    reads nothing of its node data: builtin containers with plain keys, and Equinox modules and
    NamedTuples of library classes (Equinox rebuilds a module by `object.__new__` and its fields,
    JAX a NamedTuple by its class). `tpu_msg` only maps `_nan_like` over the arrays of the value
    it rebuilds (an `equinox.error_if` over an optimistix `Solution`); a node of a user's class
    may run the user's code, which may read state, so it stays pinned."""
    node = treedef.node_data()
    if node is None:
        return treedef.num_nodes == 1
    kind, data = node
    if id(kind) in _NODES_OR_NONE:
        if data is not None and not _plain(tuple(data) if type(data) is list else data):
            return False
    elif not (
        isinstance(kind, type)
        and library_class(kind)
        and (issubclass(kind, eqx.Module) or (issubclass(kind, tuple) and hasattr(kind, "_fields")))
    ):
        return False
    return all(map(_rebuilt_by_libraries, treedef.children()))


def _messages(value: Any) -> bool:
    return (type(value) is list or type(value) is tuple) and all(
        type(v) is str or type(v) is bytes for v in value
    )


def _plain(value: Any) -> bool:
    """Whether formatting `value` (or unflattening arrays into it) runs only JAX's and Python's
    own code over values that cannot change."""
    t = type(value)
    if id(t) in _PLAIN:
        return True
    if t is tuple or t is frozenset:
        return all(map(_plain, value))
    if isinstance(value, _TreeDef):
        return _plain_tree(value)
    return False


def _plain_tree(treedef: Any) -> bool:
    node = treedef.node_data()
    if node is None:
        return treedef.num_nodes == 1  # A leaf, or `None`.
    kind, data = node
    if id(kind) not in _NODES:
        return False
    if data is not None and not _plain(tuple(data) if type(data) is list else data):
        return False
    return all(map(_plain_tree, treedef.children()))


def _holds_callable(value: Any) -> bool:
    t = type(value)
    if id(t) in _PLAIN or isinstance(value, (type, jcore.Jaxpr, jcore.ClosedJaxpr)):
        return False
    if not callable(value):
        # Through any tuple (a NamedTuple of parameters), list, set or dict.
        if isinstance(value, (tuple, list, frozenset, set)):
            return any(map(_holds_callable, value))
        if isinstance(value, dict):
            return any(map(_holds_callable, value.items()))
        return False
    # A function's own module, else its type's: JAX's own callables in parameters (a `Mesh`,
    # the functions of a PRNG implementation) are read while tracing or lowering; its callback
    # wrappers only appear under the callback primitives, handled above.
    if t is FunctionType or t is BuiltinFunctionType:
        module = getattr(value, "__module__", None) or ""
    else:
        module = getattr(t, "__module__", "") or ""
    return not (module == "jax" or module.startswith(("jax.", "jaxlib")))


def _filter_primitive(params: dict) -> bool:
    """An Equinox `filter_primitive` (lineax's `linear_solve`): its static part is read while
    tracing and lowering (its rules trace the functions it holds), never by the program."""
    try:
        from equinox.internal._primitive import Flatten
    except ImportError:  # pragma: no cover - moved: its equations count as unknown, pinned.
        return False
    return any(type(v) is Flatten for v in params.values())


def fun_identity(parts: Any) -> tuple:
    """What a pinned entry holds of the function that traced it: its parts (compared by identity
    first), its static leaves and its node data."""
    if parts is None:
        return (None, (), ())
    return (parts, parts.template, tuple(node_data(parts.treedef, list(parts.template))))


def same_fun(pinned: tuple, parts: Any) -> bool:
    """Whether `parts` holds the very static objects of the function that traced a pinned
    entry (one level down in its node data, as the cache compares node data)."""
    if pinned[0] is parts:
        return True
    if parts is None:
        return False
    _, template, data = pinned
    return (
        len(template) == len(parts.template)
        and all(map(operator.is_, template, parts.template))
        and same_node_data(node_data(parts.treedef, list(parts.template)), data)
    )


def pin_slot(key: Any, statics: Any, data: Any, fun: tuple) -> Any:
    """The key a pinned entry is kept under: its own key and the identities of the objects it
    traced (which it holds, so that no other object can have their `id`s meanwhile)."""
    _, template, fun_data = fun
    return ("pinned", key, _ids(statics), _ids(data), _ids(template), _ids(fun_data))


def _ids(items: Any) -> tuple:
    # One level down, as node data is compared: a fresh tuple per flatten holding the same values.
    return tuple(tuple(map(id, x)) if type(x) in (tuple, list) else id(x) for x in items)


def pinned_twin(entries: list, key: Any, statics: list, data: list, mask: tuple) -> Any:
    """Where a new entry's objects differ from those of a pinned entry with the same key (the
    latest of `entries`), as `Entry.unpinned` says (and why that entry is pinned,
    `Entry.pinned_by`, last); `None` if there is none. Only on a miss, which traces next: its
    miss names the new object (`Program._explain`)."""
    for other in reversed(entries):
        if other.fun is None or other.key != key:
            continue
        for i, (a, b) in enumerate(zip(statics, other.statics)):
            if a is not b:
                leaf = [j for j, m in enumerate(mask) if not m][i]
                return (leaf, short_repr(b), short_repr(a), other.pinned_by)
        for new, old in zip(data, other.data):
            if new is old:
                continue
            if type(new) in (tuple, list) and type(old) is type(new) and len(old) == len(new):
                # One level down, as node data is compared: the static field that differs.
                pair = next(((a, b) for a, b in zip(new, old) if a is not b), None)
                if pair is None:
                    continue
                new, old = pair
            return (("field", new), short_repr(old), short_repr(new), other.pinned_by)
        return (None, "", "", other.pinned_by)
    return None
