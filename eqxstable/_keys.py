"""`stable_key`: a type-exact key for "behaves identically inside a traced computation".

The key of an object is built recursively from what determines its behaviour: a function's code,
globals namespace, closure-cell contents, defaults and attributes; a partial's function, arguments
and keywords; a transform's wrapped function and every one of its options; a value's exact type
and bits. Whatever cannot be proven to stay the same (lists, dicts, plain objects, arrays reachable
through a callable) is keyed by identity.
"""

import dataclasses
import enum
import functools as ft
import operator
import struct
import types
import weakref
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ._errors import MSG_HASH_WITHOUT_EQ, StabilityWarning, warn
from ._key_types import Equal, Identity, Key, Namespace


_pack_double = struct.Struct("<d").pack
_PjitFunction = type(jax.jit(lambda: None))
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


def _key(obj: Any, ctx: _Ctx, content_ok: bool) -> Any:
    # `content_ok`: whether a NumPy array met here may be keyed by its contents. That is only so
    # when the array is reached through containers that `intern` rebuilds with read-only copies;
    # through a callable or an object it stays mutable, so it is keyed by identity.
    t = type(obj)
    handler = _HANDLERS.get(t)
    if handler is None:
        handler = _HANDLERS[t] = _resolve(t)
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


#
# Values keyed by exact type and bits.
#


def _value(obj, ctx, content_ok):
    return (type(obj), obj)


def _float(obj, ctx, content_ok):
    # Bits, not `==`: `0.0` and `-0.0` differ, and a NaN equals a NaN with the same bits.
    return (float, _pack_double(obj))


def _complex(obj, ctx, content_ok):
    return (complex, _pack_double(obj.real), _pack_double(obj.imag))


def _numpy_scalar(obj, ctx, content_ok):
    return (type(obj), obj.dtype.str, obj.tobytes())


def _slice(obj, ctx, content_ok):
    return (
        slice,
        _key(obj.start, ctx, False),
        _key(obj.stop, ctx, False),
        _key(obj.step, ctx, False),
    )


def _enum(obj, ctx, content_ok):
    return ("enum", Namespace(type(obj)), obj._name_)


def _namespace(obj, ctx, content_ok):
    # Classes, modules and module-level builtins: one object per name for the whole process.
    return Namespace(obj)


def _identity(obj, ctx, content_ok):
    ctx.identity = True
    return Identity(obj)


def _mutable_identity(obj, ctx, content_ok):
    ctx.identity = True
    ctx.mutables.append(obj)
    return Identity(obj)


def _plain_object(obj, ctx, content_ok):
    t = type(obj)
    if not getattr(obj, "__dict__", None) and _trusted_equality(t):
        # A stateless sentinel (`object()`, JAX's `UNSPECIFIED` sharding): one object for the
        # whole process, so identity is the expected key, not a fallback worth reporting.
        return Namespace(obj)
    if _from_library(t):
        # A library object such as `jax.nn.relu` (a `custom_jvp`): keyed by identity, but not
        # watched for in-place changes, which would cost every call of a jitted function.
        return _identity(obj, ctx, content_ok)
    return _mutable_identity(obj, ctx, content_ok)


def _ndarray(obj, ctx, content_ok):
    if not content_ok or obj.dtype.hasobject:
        return _mutable_identity(obj, ctx, content_ok)
    ctx.copied_arrays = True
    return (np.ndarray, obj.dtype.str, obj.shape, obj.tobytes())


def _warn_identity(obj, ctx, content_ok):
    cls = type(obj)
    warn(MSG_HASH_WITHOUT_EQ.format(cls=f"{cls.__module__}.{cls.__qualname__}"), StabilityWarning)
    return _mutable_identity(obj, ctx, content_ok)


def _equal(obj, ctx, content_ok):
    t = type(obj)
    try:
        key: Any = Equal(obj, hash(obj))
    except Exception:
        return _mutable_identity(obj, ctx, content_ok)
    if not _trusted_equality(t):
        ctx.mutables.append(obj)
    if isinstance(t.__eq__, types.WrapperDescriptorType) and getattr(obj, "__dict__", None):
        # Equality inherited from a builtin (a subclass of `int`, say) ignores the attributes
        # that the subclass added, so those are keyed as well.
        key = (key, _extra_attrs(obj, ctx))
    return key


#
# Immutable containers.
#


def _tuple(obj, ctx, content_ok):
    return (tuple, tuple([_key(x, ctx, content_ok) for x in obj]))


def _tuple_subclass(obj, ctx, content_ok):
    # NamedTuples and other tuple subclasses: the exact class and the elements. This is stricter
    # than any `__eq__` the class defines, so it is safe whatever that `__eq__` does.
    # Only NamedTuples can be rebuilt with read-only copies of their arrays.
    content_ok = content_ok and hasattr(obj, "_make")
    return (type(obj), tuple([_key(x, ctx, content_ok) for x in obj]), _extra_attrs(obj, ctx))


def _frozenset(obj, ctx, content_ok):
    # A tuple in iteration order, not a set of keys: equal frozensets can iterate in different
    # orders (`frozenset([9, 1])` and `frozenset([1, 9])`), and code that loops over one does.
    return (frozenset, tuple([_key(x, ctx, content_ok) for x in obj]))


@_compound
def _dataclass(obj, ctx, content_ok):
    t = type(obj)
    names = _field_names(t)
    owned_dicts = issubclass(t, eqx.Module)
    values = []
    for name in names:
        value = getattr(obj, name, _EMPTY_CELL)
        if owned_dicts and type(value) is dict:
            # A dict held by an (immutable) Equinox module, e.g. `equinox.Partial.keywords`, is
            # keyed by its contents and watched, so an in-place change is still noticed.
            ctx.watch.append((value, _dict_state, _dict_state(value)))
            values.append((name, dict, tuple((k, _key(v, ctx, False)) for k, v in value.items())))
        else:
            values.append((name, _key(value, ctx, False)))
    return (t, tuple(values), _extra_attrs(obj, ctx, skip=names))


@ft.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _dict_state(d: dict) -> tuple:
    return (len(d), *d.keys(), *d.values())


#
# Callables.
#


def _fn_state(f: types.FunctionType) -> tuple:
    """Everything about a function that can be rebound after it was keyed."""
    state: list[Any] = [f.__code__, f.__defaults__, f.__kwdefaults__]
    if f.__kwdefaults__:
        state.extend(_dict_state(f.__kwdefaults__))
    if f.__closure__:
        for cell in f.__closure__:
            try:
                state.append(cell.cell_contents)
            except ValueError:
                state.append(_EMPTY_CELL)
    d = f.__dict__
    if d:
        state.extend(_dict_state(d))
    return tuple(state)


@_compound
def _function(f, ctx, content_ok):
    memo = _memo.get(id(f)) if ctx.use_memo else None
    if memo is not None and memo.ref() is f and _still_valid(memo.watch):
        # Every memoised key is closed (its back-references point inside it), so it means the
        # same embedded here.
        ctx.watch.extend(memo.watch)
        ctx.identity |= memo.key.identity
        return memo.key.parts
    ctx.watch.append((f, _fn_state, _fn_state(f)))
    cells = ()
    if f.__closure__:
        contents = []
        for cell in f.__closure__:
            try:
                contents.append(_key(cell.cell_contents, ctx, False))
            except ValueError:
                contents.append(_EMPTY_CELL)
        cells = tuple(contents)
    kwdefaults = f.__kwdefaults__
    return (
        "fn",
        f.__code__,
        Namespace(f.__globals__),
        _key(f.__defaults__, ctx, False),
        _items(kwdefaults, ctx, False) if kwdefaults else (),
        cells,
        _extra_attrs(f, ctx),
    )


def _partial_state(p: ft.partial) -> tuple:
    return (p.func, p.args, *_dict_state(p.keywords))


@_compound
def _partial(p, ctx, content_ok):
    # `functools.partial` and `jax.tree_util.Partial`; `equinox.Partial` is a module.
    ctx.watch.append((p, _partial_state, _partial_state(p)))
    return (
        type(p),
        _key(p.func, ctx, False),
        _key(p.args, ctx, False),
        _items(p.keywords, ctx, False),
        _extra_attrs(p, ctx),
    )


@_compound
def _method(m, ctx, content_ok):
    return ("method", _key(m.__func__, ctx, False), _key(m.__self__, ctx, False))


@_compound
def _builtin(f, ctx, content_ok):
    owner = f.__self__
    if owner is None or isinstance(owner, types.ModuleType):
        return Namespace(f)
    return ("builtin-method", f.__name__, _key(owner, ctx, False))


@_compound
def _pjit(f, ctx, content_ok):
    # `jax.jit(fun, **options)` keeps `fun` and every option in `_fun` and `_jit_info`. These are
    # JAX internals: if they move, fall back to identity (and `tests/test_keys.py` notices).
    try:
        fun, info = f._fun, f._jit_info
    except AttributeError:
        return _identity(f, ctx, content_ok)
    return ("jit", _key(fun, ctx, False), _key(info, ctx, False))


def _resolve(t: type) -> _Handler:
    """Chooses the handler for a type. The choice depends on the type only, so it is cached."""
    simple: dict[type, _Handler] = {
        int: _value,
        bool: _value,
        str: _value,
        bytes: _value,
        type(None): _value,
        type(Ellipsis): _value,
        type(NotImplemented): _value,
        range: _value,
        types.CodeType: _value,  # code objects compare by value, constants type-exactly
        float: _float,
        complex: _complex,
        slice: _slice,
        tuple: _tuple,
        frozenset: _frozenset,
        types.FunctionType: _function,
        types.MethodType: _method,
        types.BuiltinFunctionType: _builtin,
        types.ModuleType: _namespace,
        _PjitFunction: _pjit,
        np.ndarray: _ndarray,
    }
    if t in simple:
        return simple[t]
    if issubclass(t, type):
        return _namespace
    if issubclass(t, ft.partial):
        return _partial
    if issubclass(t, enum.Enum):
        return _enum
    if issubclass(t, np.generic) and not issubclass(t, np.object_):
        return _numpy_scalar
    if issubclass(t, jax.Array):
        return _identity  # immutable, and too costly to key by contents
    if issubclass(t, tuple):
        return _tuple_subclass
    if issubclass(t, (list, dict, set, bytearray, np.ndarray)):
        return _mutable_identity
    if issubclass(t, eqx.Module) or (
        dataclasses.is_dataclass(t) and t.__dataclass_params__.frozen  # pyright: ignore
    ):
        return _dataclass
    has_hash = t.__hash__ is not None and t.__hash__ is not object.__hash__
    has_eq = t.__eq__ is not object.__eq__
    if has_hash and has_eq:
        return _equal
    if has_hash:
        return _warn_identity
    return _plain_object


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
_MEMO_TYPES = (types.FunctionType, ft.partial, _PjitFunction, eqx.Module)


def _forget(i: int, ref: weakref.ref) -> None:
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


def compute_key(obj: Any, use_memo: bool = True) -> tuple[Key, _Ctx]:
    """Computes the key of `obj` from scratch, returning it with the computation's context
    (what it watched, which mutable objects it keyed by identity), and memoises it."""
    ctx = _Ctx(use_memo)
    try:
        parts = _key(obj, ctx, True)
    except RecursionError:
        ctx = _Ctx()
        parts = _mutable_identity(obj, ctx, True)
    key = Key(parts, ctx.identity)
    if isinstance(obj, _MEMO_TYPES) and not ctx.copied_arrays:
        i = id(obj)
        try:
            ref = weakref.ref(obj, lambda r, i=i: _forget(i, r))
        except TypeError:
            pass
        else:
            _memo[i] = _MemoEntry(ref, key, _freeze(ctx.watch))
    return key, ctx


def stable_key(obj: Any) -> Key:
    """The key that [`eqxstable.intern`][] uses.

    `stable_key(a) == stable_key(b)` exactly when `a` and `b` are equivalent: guaranteed to
    behave identically inside a traced computation. Keys are type-exact (`1`, `1.0`, `True` and
    `np.int32(1)` are four keys; `0.0` and `-0.0` differ). An object that cannot be proven
    equivalent to anything else gets a key that equals only itself.

    **Arguments:**

    - `obj`: any Python object.

    **Returns:**

    A hashable key. Keys of the same object stay valid while the object is unchanged; if a
    closure cell is rebound, the next call returns the new key.

    !!! example

        ```python
        import eqxstable as es

        assert es.stable_key(lambda x: x + 1) == es.stable_key(lambda x: x + 1)
        assert es.stable_key(1) != es.stable_key(1.0)
        ```
    """
    entry = _memo.get(id(obj))
    if entry is not None and entry.ref() is obj and _still_valid(entry.watch):
        return entry.key
    return compute_key(obj)[0]


def key_uses_identity(key: Key) -> bool:
    """Whether `key` fell back to identity somewhere (a list, a plain object, an array reachable
    through a callable): an equivalent rebuilt object will then get a different key."""
    return key.identity


def _clear_memo() -> None:
    _memo.clear()


def __getattr__(name: str) -> Any:
    # `snapshot_mutables` lives in `_mutation.py` (it builds on this module); it is reachable from
    # here too, as the jit layer's design notes first placed it.
    if name in ("snapshot_mutables", "Snapshot"):
        from . import _mutation

        return getattr(_mutation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
