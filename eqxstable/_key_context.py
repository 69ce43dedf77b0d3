"""The machinery of a key computation: its per-call context, the recursion with cycle handling,
identity fallbacks, and the memo that makes the key of an already-seen callable cheap.

The handlers themselves live in `_keys.py` (values and containers) and `_key_callables.py`.
"""

import functools as ft
import operator
import weakref
from collections.abc import Callable
from typing import Any

from ._key_types import Identity


_EMPTY_CELL = ("empty-cell",)
# `__doc__` and `__annotations__` never change what a callable computes, and `__annotations__`
# is a fresh dict per function, which would otherwise make every rebuilt wrapper look new.
_IGNORED_ATTRS = frozenset({"__doc__", "__annotations__"})
# Classes with their own `__eq__`/`__hash__` that are immutable, so that a key built with their
# equality can never go stale. Instances of other such classes are checked for mutation.
_TRUSTED_MODULES = ("builtins", "numpy", "jax", "jaxlib", "equinox", "inspect", "optax")


# Libraries whose callables and sentinels are not changed in place once in use (a
# `jax.custom_jvp` is defined once, then called). NumPy is not among them: its random generators
# change state on every draw.
_JAX_LIBRARIES = ("jax", "jaxlib", "equinox", "optax")


def _in_modules(cls: type, names: tuple[str, ...]) -> bool:
    module = getattr(cls, "__module__", None) or ""
    return any(module == name or module.startswith(name + ".") for name in names)


@ft.cache
def _from_library(cls: type) -> bool:
    return _in_modules(cls, _JAX_LIBRARIES)


@ft.cache
def _trusted_equality(cls: type) -> bool:
    """Whether `cls`'s own `__eq__`/`__hash__` come from a library whose hashable objects are
    immutable (dtypes, signatures, tree definitions, shardings)."""
    return _in_modules(cls, _TRUSTED_MODULES)


class _Ctx:
    """Per-call state of a key computation."""

    __slots__ = ("stack", "depth", "watch", "identity", "mutables", "copied_arrays", "use_memo")

    def __init__(self, use_memo: bool = True):
        # Memoised sub-keys do not record the mutable objects they reach, so a computation that
        # must list those (a mutation snapshot) does not use them.
        self.use_memo = use_memo
        # id -> depth of the compound objects being keyed, so cycles become back-references.
        self.stack: dict[int, int] = {}
        self.depth = 0
        # (object, state function, state): what must be unchanged for the key to stay valid.
        self.watch: list[tuple[Any, Callable[[Any], tuple], tuple]] = []
        self.identity = False
        # Identity-keyed objects whose contents can change in place (for mutation detection).
        self.mutables: list[Any] = []
        # Whether a NumPy array was keyed by its contents (the canonical copy must then be rebuilt).
        self.copied_arrays = False


_Handler = Callable[[Any, _Ctx, bool], Any]
_HANDLERS: dict[type, _Handler] = {}


def resolve(t: type) -> _Handler:
    """Chooses the handler for a type; `eqxstable._keys` installs the real one when imported
    (the handlers of values live there, and import this module)."""
    raise RuntimeError("eqxstable._keys was not imported")


def _key(obj: Any, ctx: _Ctx, content_ok: bool) -> Any:
    # `content_ok`: whether a NumPy array met here may be keyed by its contents. That is only so
    # when the array is reached through containers that `intern` rebuilds with read-only copies;
    # through a callable or an object it stays mutable, so it is keyed by identity.
    t = type(obj)
    handler = _HANDLERS.get(t)
    if handler is None:
        handler = _HANDLERS[t] = resolve(t)
    return handler(obj, ctx, content_ok)


def _compound(fn: _Handler) -> _Handler:
    """Wraps a handler of an object that contains others: cycles become relative
    back-references (so a sub-key means the same wherever it is embedded), and an object whose
    parts cannot be read falls back to identity."""

    def handler(obj, ctx, content_ok):
        i = id(obj)
        depth = ctx.stack.get(i)
        if depth is not None:
            return ("cycle", ctx.depth - depth)
        ctx.stack[i] = ctx.depth
        ctx.depth += 1
        try:
            return fn(obj, ctx, content_ok)
        except Exception:
            return _identity(obj, ctx, content_ok)
        finally:
            ctx.depth -= 1
            del ctx.stack[i]

    return handler


def _items(mapping: Any, ctx: _Ctx, content_ok: bool) -> tuple:
    # In iteration order, which is behaviour: `partial(f, a=1, b=2)` and `partial(f, b=2, a=1)`
    # pass `**kwargs` in different orders, and a function may iterate them.
    return tuple([(_key(k, ctx, content_ok), _key(v, ctx, content_ok)) for k, v in mapping.items()])


def _extra_attrs(obj: Any, ctx: _Ctx, skip: Any = ()) -> tuple:
    d = getattr(obj, "__dict__", None)
    if not d:
        return ()
    return tuple(
        [
            (k, _key(v, ctx, False))
            for k, v in d.items()
            if k not in skip and k not in _IGNORED_ATTRS
        ]
    )


def _identity(obj: Any, ctx: _Ctx, content_ok: bool) -> Identity:
    ctx.identity = True
    return Identity(obj)


def _mutable_identity(obj: Any, ctx: _Ctx, content_ok: bool) -> Identity:
    ctx.identity = True
    ctx.mutables.append(obj)
    return Identity(obj)


def _dict_state(d: dict) -> tuple:
    return (len(d), *d.keys(), *d.values())


#
# The memo: repeated keys of the same (weak-referenceable) object are cheap.
#


class _MemoEntry:
    __slots__ = ("ref", "key", "watch")

    def __init__(self, ref, key, watch):
        self.ref = ref
        self.key = key
        self.watch = watch


_memo: dict[int, _MemoEntry] = {}


def _forget(i: int, ref: weakref.ref, _memo: dict = _memo) -> None:
    # `_memo` is bound when the function is defined: at interpreter exit, a weak reference may
    # call this after the module's globals were cleared.
    entry = _memo.get(i)
    if entry is not None and entry.ref is ref:
        del _memo[i]


def _weak(x: Any) -> Any:
    return weakref.ref(x) if type(x).__weakrefoffset__ else x


def _freeze(watch: list) -> tuple:
    """The watch with weak references wherever possible, to be kept in the memo: a memo entry
    must not keep alive the object it describes (a self-recursive closure's state holds itself)."""
    return tuple(
        (_weak(obj), state_fn, tuple([_weak(x) for x in state])) for obj, state_fn, state in watch
    )


def _same(now: Any, saved: Any) -> bool:
    if now is saved:
        return True
    if type(saved) is weakref.ref:
        target = saved()
        return target is not None and target is now
    return False


def _still_valid(watch: tuple) -> bool:
    for holder, state_fn, state in watch:
        obj = holder() if type(holder) is weakref.ref else holder
        if obj is None:
            return False
        now = state_fn(obj)
        if len(now) != len(state):
            return False
        if not all(map(operator.is_, now, state)) and not all(map(_same, now, state)):
            return False
    return True
