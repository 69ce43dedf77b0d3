"""Keys of library objects that can change: buffers (`memoryview`, `array.array`, `mmap`,
ctypes, `np.void`), weak references and library containers (`os.environ`, a
`WeakValueDictionary`), keyed by identity and what they hold now, watched; the import system's
table of modules and C objects whose state Python cannot read, a key equal to nothing for their
reader; and a library's data object one level deep (`shallow`).

Each handler here is a row of the table in `README.md` (its id is given in the docstring).
"""

import ctypes
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ._context import compound, Ctx, key
from ._dtypes import dtype_key
from ._fallbacks import too_deep
from ._mutable import mutable
from ._per_class import type_ids
from ._state import (
    added_state,
    class_part,
    impure_library,
    object_state,
    slots_of,
    unreadable,
)
from ._types import Identity, MutableKey, Namespace
from ._watch import MISSING, size


#
# Buffers: this very object and its bytes, compared on each call.
#


class BytesOf:
    """A buffer in a `Watch`'s blobs: `tobytes()` reads its bytes now (`None` once it cannot be
    read: a released view, a closed map), so that a change in place is seen."""

    __slots__ = ("obj", "read")

    def __init__(self, obj: Any, read: Callable[[Any], bytes]):
        self.obj = obj
        self.read = read

    def tobytes(self) -> bytes | None:
        try:
            return self.read(self.obj)
        except Exception:  # noqa: BLE001
            return None


def _buffer(obj: Any, ctx: Ctx, read: Callable[[Any], bytes], describe: Any) -> Any:
    ctx.identity = True
    data = read(obj)
    ctx.blobs.append((BytesOf(obj, read), data))
    # A user's subclass (every ctypes `Structure`): its methods run, its attributes are read.
    cls = class_part(type(obj), ctx)
    return MutableKey(Identity(obj), (cls, describe, data, added_state(obj, ctx)))


def _view_bytes(obj: Any) -> bytes:
    return memoryview(obj).tobytes()


def memoryview_(obj: memoryview, ctx: Ctx, content_ok: bool) -> Any:
    """`K-buffer`: a view over memory that can change underneath (a `bytearray`, an array)."""
    return _buffer(obj, ctx, memoryview.tobytes, (obj.format, obj.shape))


def array_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-buffer`: `array.array`, typecode and bytes."""
    return _buffer(obj, ctx, type(obj).tobytes, obj.typecode)


def _void_bytes(obj: Any) -> bytes:
    return obj.tobytes()


def void(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-buffer`: a structured NumPy scalar (`np.void`) is a view into its array, writable in
    place (`v["a"] = 5`): this very object, its dtype and its bytes."""
    return _buffer(obj, ctx, _void_bytes, dtype_key(obj.dtype))


def _map_bytes(obj: Any) -> bytes:
    return obj[:]


def mmap_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-buffer`: a memory map, read whole (never exported: a view would forbid `close`)."""
    return _buffer(obj, ctx, _map_bytes, None)


_POINTERS = (ctypes._Pointer, ctypes.c_char_p, ctypes.c_wchar_p, ctypes.c_void_p)
_FUNCTION = type(ctypes.CFUNCTYPE(None))


def _holds_pointer(t: Any, depth: int = 0) -> bool:
    if depth > 20 or not isinstance(t, type) or issubclass(t, (*_POINTERS, _FUNCTION)):
        return True
    if issubclass(t, ctypes.Array):
        return _holds_pointer(t._type_, depth + 1)  # pyright: ignore[reportAttributeAccessIssue]
    if issubclass(t, (ctypes.Structure, ctypes.Union)):
        fields = getattr(t, "_fields_", ())
        return any(_holds_pointer(f[1], depth + 1) for f in fields)
    return False


CTYPES = (ctypes._SimpleCData, ctypes.Array, ctypes.Structure, ctypes.Union, *_POINTERS, _FUNCTION)


def ctypes_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-buffer`: a ctypes object by its bytes. One holding a pointer reads memory its bytes do
    not show: a key equal to nothing."""
    if _holds_pointer(type(obj)):
        return too_deep(obj, ctx)
    return _buffer(obj, ctx, _view_bytes, None)


#
# Weak references and library containers.
#


def _alive(box: tuple) -> tuple:
    return (box[0]() is None,)


@compound
def weak_ref(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-weakref`: this very reference (never its referent's `==`) and what the referent is
    now; its death is a change."""
    ctx.identity = True
    # In a tuple: a `Watch` takes a bare weak reference for one of its own, and would follow it.
    box = (obj,)
    ctx.states.append((box, _alive, _alive(box)))
    parts = (class_part(type(obj), ctx), key(obj(), ctx, False), added_state(obj, ctx))
    return MutableKey(Identity(obj), parts)


def weak_proxy(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-weakref`: a proxy forwards every read to a referent that cannot be named: a key equal
    to nothing."""
    return too_deep(obj, ctx)


def _canonical(x: Any) -> Any:
    # A mapping that decodes on each read (`os.environ`) gives a new `str` each time: the
    # interned one is the same object while the text is the same.
    return sys.intern(x) if type(x) is str else x


def items_state(obj: Any) -> tuple:
    if isinstance(obj, Mapping):
        items = list(obj.items())
        return (
            size(len(items)),
            *[_canonical(k) for k, _ in items],
            *[_canonical(v) for _, v in items],
        )
    items = list(obj)
    return (size(len(items)), *map(_canonical, items))


@compound
def container(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-library-container`: a mapping, sequence or set of a library class (`os.environ`, a
    `WeakValueDictionary`, a `collections.deque`): this very object and its items now, watched
    through its own `items()` or iteration."""
    ctx.identity = True
    ctx.states.append((obj, items_state, items_state(obj)))
    if isinstance(obj, Mapping):
        items: Any = tuple([(key(k, ctx, False), key(v, ctx, False)) for k, v in obj.items()])
    else:
        items = tuple([key(x, ctx, False) for x in obj])
    return MutableKey(Identity(obj), (Namespace(type(obj)), items))


def dict_(obj: dict, ctx: Ctx, content_ok: bool) -> Any:
    """`K-mutable` for a `dict`, except the import system's table of modules (`sys.modules`):
    `K-impure-library`. A reader of it (`sys.modules[__name__].LR`) may read any attribute of any
    module under a name computed at run time, which no key can enumerate; walked whole, it was
    every module's every name, walked again whenever any module's dict changed (a loop variable
    of `__main__` rebound each step: tens of milliseconds a call, and a trace). The reader gets a
    key equal to nothing naming it and keeps that key through the memo, as a reader of
    `os.getenv` does; on its own it is itself. Never walked."""
    if obj is sys.modules:
        if ctx.depth == 0:
            ctx.identity = True
            return Identity(obj)
        return impure_library("sys.modules", ctx)
    return mutable(obj, ctx, content_ok)


def opaque(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-opaque`: an object with state Python cannot read (a C object that is not a constant:
    a lock, an `itertools.count`): a key equal to nothing (`_state.unreadable`)."""
    return unreadable(obj, ctx)


# By identity (`type_ids`): a user's metaclass may call its class equal to `int`.
_PLAIN = type_ids((int, float, complex, str, bytes, bool, type(None)))


def _value_part(v: Any, ctx: Ctx) -> Any:
    # A value a library object holds: by value where plain, else by identity (what it holds in
    # turn is the library's own, and is not walked).
    return key(v, ctx, False) if id(type(v)) in _PLAIN else Identity(v)


def shallow(obj: Any, ctx: Ctx) -> Any:
    """`K-module-attrs`: an object with state that a library module holds (a config object such
    as `jax.config`, a registry), read by a user function: itself and its attributes one level
    deep (plain values by value, anything else by identity), watched. What those hold in turn is
    the library's own, and is not walked (it may be large, and changes on every call)."""
    ctx.identity = True
    ctx.states.append((obj, object_state, object_state(obj)))
    names = [*(getattr(obj, "__dict__", None) or {}), *slots_of(type(obj))]
    parts = tuple((name, _value_part(getattr(obj, name, MISSING), ctx)) for name in names)
    return MutableKey(Identity(obj), (Namespace(type(obj)), parts))


def jax_config(obj: Any, ctx: Ctx, content_ok: bool = False) -> Any:
    """`K-module-attrs`: JAX's configuration (`jax.config`) read by a user function: the value of
    every flag (`jax.config.jax_enable_checks`, `jax.config.values[...]`), by value where plain,
    watched. JAX's trace context keys only some flags; a trace may branch on any other, so a
    function reading the configuration is keyed by all of them (about 130: read on a miss, and
    compared by identity on the hits of the functions that read it)."""
    parts = _watched_values(obj, ctx, _config_state)
    return MutableKey(Identity(obj), (Namespace(type(obj)), tuple(zip(obj.values, parts))))


def jax_config_state(obj: Any, ctx: Ctx, content_ok: bool = False) -> Any:
    """`K-module-attrs`: one of JAX's configuration holders (`jax.enable_checks`,
    `jax.log_compiles`: a `State`, or a `Flag`) read by a user function (`.value`, or as a
    context manager): its current value, which a `with jax.enable_checks(True):` or a
    `jax.config.update` changes (in this thread's context), watched (attack 12a-09)."""
    (part,) = _watched_values(obj, ctx, _holder_state)
    return MutableKey(Identity(obj), (Namespace(type(obj)), part))


def _watched_values(obj: Any, ctx: Ctx, read: Callable[[Any], tuple]) -> list:
    # This very object, watched through `read` (its values now): the key part of each value.
    ctx.identity = True
    state = read(obj)
    ctx.states.append((obj, read, state))
    return [_value_part(v, ctx) for v in state]


def _holder_state(obj: Any) -> tuple:
    try:
        return (obj.value,)
    except Exception:  # Not readable now: a value no key equals.
        return (object(),)


def _config_state(obj: Any) -> tuple:
    # Every flag's current value (a context manager's included: `values` reads each holder).
    return tuple(obj.values.values())
