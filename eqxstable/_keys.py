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
import struct
import types
import weakref
from typing import Any

import equinox as eqx
import jax
import numpy as np

from . import _key_context
from ._errors import MSG_HASH_WITHOUT_EQ, StabilityWarning, warn
from ._key_callables import (
    _builtin,
    _fn_state as _fn_state,
    _function,
    _method,
    _partial,
    _pjit,
    _PjitFunction,
)
from ._key_context import (
    _compound,
    _Ctx,
    _dict_state,
    _EMPTY_CELL,
    _extra_attrs,
    _forget,
    _freeze,
    _from_library,
    _Handler,
    _identity,
    _JAX_LIBRARIES as _JAX_LIBRARIES,
    _key,
    _memo,
    _MemoEntry,
    _mutable_identity,
    _still_valid as _still_valid,
    _trusted_equality,
)
from ._key_types import Equal, Key, Namespace


_pack_double = struct.Struct("<d").pack


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


def _range(obj, ctx, content_ok):
    # Not `range.__eq__`, which calls all empty ranges equal: `range(0).start` is 0 and
    # `range(2, 2).start` is 2.
    return (range, obj.start, obj.stop, obj.step)


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
        range: _range,
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


_key_context.resolve = _resolve
_MEMO_TYPES = (types.FunctionType, ft.partial, _PjitFunction, eqx.Module)


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

        def leaky(slope):
            return lambda x: x * slope if x < 0 else x

        # Made by the same code with equal captures: equivalent, though two objects.
        assert leaky(0.1) is not leaky(0.1)
        assert es.stable_key(leaky(0.1)) == es.stable_key(leaky(0.1))
        assert es.stable_key(leaky(0.1)) != es.stable_key(leaky(0.2))
        assert es.stable_key(1) != es.stable_key(1.0)
        ```

        Two lambdas written separately are different code objects (even on one line, their
        columns differ), so they get different keys.
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
