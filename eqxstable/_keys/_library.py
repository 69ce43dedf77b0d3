"""Keys of objects of library classes: the immutable values on the allowlist (`Decimal`,
`Fraction`, `datetime`, paths, patterns, `UUID`, dtypes, signatures), keyed by their whole state;
buffers (`memoryview`, `array.array`, `mmap`, ctypes), weak references and library containers
(`os.environ`, a `WeakValueDictionary`), keyed by identity and what they hold now, watched;
and the function an Equinox `_Closure` rebuilds at each call (`closure_function`).

Each handler here is a row of the table in `README.md` (its id is given in the docstring).
"""

import ctypes
import decimal
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._arrays import dtype_key
from ._context import compound, Ctx, identity, key, too_deep
from ._mutable import mutable
from ._state import (
    added_state,
    class_part,
    dict_state,
    impure_library,
    object_state,
    slots_of,
    unreadable,
)
from ._types import Equal, Identity, MutableKey, Namespace
from ._watch import MISSING, size


#
# Values on the allowlist: immutable, and all of their state is read here.
#


def decimal_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-decimal`: sign, digits and exponent (`Decimal('1.00')` and `Decimal('1.0')` differ;
    NaN, sNaN and infinities by their marker), and the settings of the thread's decimal context,
    watched: arithmetic on it in a trace reads them (`getcontext().prec = 2` rounds `1/3`)."""
    ctx.states.append((decimal, decimal_context, decimal_context(decimal)))
    return (type(obj), obj.as_tuple(), decimal_context(decimal))


def decimal_context(_: Any) -> tuple:
    """What of the thread's decimal context an operation's result depends on: precision,
    rounding, exponent limits, `capitals`, `clamp` and which signals trap (never its `flags`,
    which operations set). Each as one object per value, for a state compared with `is`."""
    c = decimal.getcontext()
    ints = (c.prec, c.Emin, c.Emax, c.capitals, c.clamp)
    return (*(size(n) if n >= 0 else _negative(n) for n in ints), c.rounding, *c.traps.values())


_negatives: dict[int, int] = {}


def _negative(n: int) -> int:
    return _negatives.setdefault(n, n)


def fraction(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-fraction`: numerator and denominator (ints, always in lowest terms)."""
    return (type(obj), obj.numerator, obj.denominator)


@compound
def datetime_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: every field, `fold` and the `tzinfo` (keyed as what it is)."""
    return (
        type(obj),
        obj.year,
        obj.month,
        obj.day,
        obj.hour,
        obj.minute,
        obj.second,
        obj.microsecond,
        obj.fold,
        key(obj.tzinfo, ctx, False),
    )


def date_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: year, month, day."""
    return (type(obj), obj.year, obj.month, obj.day)


@compound
def time_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: every field, `fold` and the `tzinfo`."""
    fields = (obj.hour, obj.minute, obj.second, obj.microsecond, obj.fold)
    return (type(obj), fields, key(obj.tzinfo, ctx, False))


def timedelta_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: days, seconds, microseconds (the normalised form)."""
    return (type(obj), obj.days, obj.seconds, obj.microseconds)


def timezone_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: the offset and the name (`%Z` prints it), and whether that name was given:
    `timezone(timedelta(0), "UTC")` names itself `UTC` as `timezone.utc` does, but its `repr`
    and pickle hold the name. `__getinitargs__` is what it is rebuilt from: the offset alone, or
    the offset and the name as given."""
    given = tuple([key(name, ctx, False) for name in obj.__getinitargs__()[1:]])
    offset = timedelta_(obj.utcoffset(None), ctx, False)
    return (type(obj), offset, obj.tzname(None), given)


def zoneinfo_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: a `ZoneInfo` is immutable; one object per zone (the class's own cache), so
    this very object."""
    return ("zoneinfo", Namespace(obj))


def path(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-path`: exact type and the path as text (a pure path is immutable; a concrete path
    holds nothing but its text: what the file system holds is never part of a key)."""
    return (type(obj), str(obj))


@compound
def pattern(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-pattern`: the pattern (`str` or `bytes`) and the flags it was compiled with."""
    return (type(obj), key(obj.pattern, ctx, False), obj.flags)


@compound
def uuid_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-uuid`: the 128-bit value and `is_safe`."""
    return (type(obj), obj.int, key(obj.is_safe, ctx, False))


@compound
def signature(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-signature`: each parameter and the return annotation (`jax.jit` keeps the signature
    of the function it wraps)."""
    params = tuple([key(p, ctx, False) for p in obj.parameters.values()])
    return (type(obj), params, key(obj.return_annotation, ctx, False))


@compound
def parameter(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-signature`: name, kind, default and annotation."""
    parts = (obj.name, obj.kind, obj.default, obj.annotation)
    return (type(obj), tuple([key(x, ctx, False) for x in parts]))


def _names(dt: np.dtype) -> tuple:
    return (dt.names,)


@compound
def dtype_(obj: np.dtype, ctx: Ctx, content_ok: bool) -> Any:
    """`K-dtype`: the full description. A structured dtype's `names` can be assigned in place,
    and metadata can hold anything: such a dtype is watched and never substituted."""
    parts: Any = (np.dtype, dtype_key(obj))
    if obj.names is not None or obj.metadata:
        ctx.own_eq = True
        ctx.states.append((obj, _names, _names(obj)))
        meta = obj.metadata or {}
        parts = (*parts, tuple([(k, key(v, ctx, False)) for k, v in meta.items()]))
    return parts


def _jax_values() -> tuple[type, ...]:
    import jax
    import jax.core

    names = [
        (jax, "ShapeDtypeStruct"),
        (jax.sharding, "NamedSharding"),
        (jax.sharding, "AbstractMesh"),
        (jax.core, "ShapedArray"),
    ]
    return tuple(t for m, n in names if isinstance(t := getattr(m, n, None), type))


# JAX's immutable descriptions of arrays (what a closure-converted jaxpr or `eval_shape` holds):
# JAX itself keys its caches by their `==`, which is exact and covers their whole state.
JAX_VALUES = _jax_values()


def jax_value(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-jax-value`: JAX's `==` within the exact type, substituted."""
    return Equal(obj, hash(obj))


def _key_path_entries() -> dict[type, str]:
    import jax.tree_util as jtu

    names = {"DictKey": "key", "SequenceKey": "idx", "GetAttrKey": "name"}
    names["FlattenedIndexKey"] = "key"
    return {t: f for n, f in names.items() if isinstance(t := getattr(jtu, n, None), type)}


# JAX's key-path entries (C++ classes on recent jaxlib) and the one field each holds. Their own
# `==` compares that field with Python's `==`, so `DictKey(1)`, `DictKey(True)` and
# `DictKey(1.0)` are equal: they are keyed by their exact type and the field keyed as what it is.
KEY_PATH_ENTRIES = _key_path_entries()


@compound
def key_path_entry(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-key-path`: `DictKey`, `SequenceKey`, `GetAttrKey`, `FlattenedIndexKey` by their exact
    type and their one field, keyed type-exactly (a user object held as a dict key: as what it
    is). The field cannot be reassigned (a read-only property of the C++ class)."""
    return (type(obj), key(getattr(obj, KEY_PATH_ENTRIES[type(obj)]), ctx, False))


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


_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def shallow(obj: Any, ctx: Ctx) -> Any:
    """`K-module-attrs`: an object with state that a library module holds (a config object such
    as `jax.config`, a registry), read by a user function: itself and its attributes one level
    deep (plain values by value, anything else by identity), watched. What those hold in turn is
    the library's own, and is not walked (it may be large, and changes on every call)."""
    ctx.identity = True
    ctx.states.append((obj, object_state, object_state(obj)))
    names = [*(getattr(obj, "__dict__", None) or {}), *slots_of(type(obj))]
    parts = []
    for name in names:
        v = getattr(obj, name, MISSING)
        parts.append((name, key(v, ctx, False) if type(v) in _PLAIN else Identity(v)))
    return MutableKey(Identity(obj), (Namespace(type(obj)), tuple(parts)))


#
# Equinox's closures as pytrees (`equinox.internal.closure_to_pytree`, which optimistix applies
# to optax's optimisers): the function a `_Closure` runs, with its cells made afresh per call.
#

_CLOSURES = "equinox.internal._closure_to_pytree"


def _closures() -> Any:
    """Equinox's module of closures as pytrees, if it is imported and still has the parts the rule
    below models (`_Closure.__call__` runs `_adjust_function_closure(fn.fn, cells)` over cells
    `_make_cell` makes from its pytree contents); else `None`, and the class keeps its own row."""
    m = sys.modules.get(_CLOSURES)
    parts = ("_FunctionWithEquality", "_Closure", "_adjust_function_closure", "_make_cell")
    if m is None or not all(hasattr(m, name) for name in parts):
        return None
    return m


def closure_function_class() -> type | None:
    """The exact class `_FunctionWithEquality` of Equinox, or `None` where Equinox moved it."""
    m = _closures()
    return None if m is None else m._FunctionWithEquality


def _template_state(f: types.FunctionType) -> tuple:
    # What `_adjust_function_closure` copies from the function, all assignable in place (its cell
    # contents are not read: the `_Closure` brings its own).
    state: list[Any] = [f.__code__, f.__globals__, f.__defaults__, f.__kwdefaults__]
    if f.__kwdefaults__:
        state.extend(dict_state(f.__kwdefaults__))
    state.extend((f.__name__, f.__qualname__, f.__module__, f.__doc__, f.__annotations__))
    if f.__annotations__:
        state.extend(dict_state(f.__annotations__))
    return tuple(state)


@compound
def closure_function(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-closure-function`: Equinox's `_FunctionWithEquality`, the static `fn` of a `_Closure`.
    The `_Closure` never calls `fn.fn` itself: each call rebuilds it by Equinox's own
    `_adjust_function_closure` (code, globals, defaults, a copy of the keyword defaults, names,
    annotations) over fresh cells holding the `_Closure`'s pytree contents, which the jit keys
    as leaves of their own. So it is keyed as that rebuilt function, made here by the same Equinox
    code over fresh cells holding `None` (`K-function`: the cells' number, never what `fn.fn`'s
    own cells hold), and watched as what that copies from `fn.fn`. Never substituted: `fn` can be
    reassigned, and `fn.fn`'s own defaults and keyword defaults changed, in each object apart."""
    m = _closures()
    f = vars(obj).get("fn")
    if m is None or type(f) is not types.FunctionType or set(vars(obj)) != {"fn"}:
        return identity(obj, ctx)
    ctx.own_eq = True
    ctx.states.append((obj, object_state, object_state(obj)))
    ctx.states.append((f, _template_state, _template_state(f)))
    cells = None if f.__closure__ is None else tuple(m._make_cell(None) for _ in f.__closure__)
    rebuilt = m._adjust_function_closure(f, cells)
    # No reference to the cells may be held here while it is keyed: a cell that only its
    # function holds is one no one can rebind (`_cells.lone_cell`), as the fresh ones of a call are.
    del cells
    return (type(obj), key(rebuilt, ctx, False))
