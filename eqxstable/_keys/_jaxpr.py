"""Keys of JAX jaxprs (`Jaxpr`, `ClosedJaxpr`) by value.

Equinox's `filter_closure_convert` (run by lineax's `FunctionLinearOperator` when it is built)
holds a `ClosedJaxpr` as a static field, so the same computation converted twice gives two jaxpr
objects. Keyed by identity, an operator rebuilt each step then recompiles every time. A jaxpr is
a program, and two jaxprs with the same equations compute the same thing, so it is keyed by what
JAX runs from it:

- each equation's primitive, its parameters (sub-jaxprs keyed here recursively, everything else
  with the caller's key function), its effects and its context (`JaxprEqnContext`: compute type,
  mesh, PRNG partitioning, XLA metadata), by the value of each setting: newer JAX interns
  contexts (equal settings, one object), older JAX (0.5.3, measured) makes one per equation
  and gives it no `__eq__`;
- each variable by its position (the order it is bound in: constvars, invars, then each
  equation's outputs) and its abstract value (by the value of each of its slots: newer JAX
  makes equal avals that are not the same object and have no `__eq__`); dropped outputs as such;
- literals by their exact type and bits and abstract value: a Python scalar (JAX's typed
  `TypedFloat`, whose `==` calls `-0.0` and `0.0` equal, included) by its IEEE bits and dtype
  here, never by the key function's `==`; an array by its dtype, shape and bytes;
- the jaxpr's effects; a `ClosedJaxpr`'s constants by dtype, shape and bytes.

Left out, as they never change what runs: source locations and debug info (names of arguments and
results). An equation's parameter is keyed by value (by `key_of`) only where its kind is on the
allowlist of values (`_param`: jaxprs, tuples, scalars, strings, dtypes, enum members, Python
functions, partials, methods, NamedTuples of values, `eqx.Module`s, JAX's own hashable values);
anything else (a `custom_jvp`'s or `custom_vjp`'s rule, a JAX `WrappedFun` that may hold the live
trace that made the jaxpr; a callback's wrapper) is itself, never walked, with the keys layer's
identity (`opaque`); a `WrappedFun` over a user's function (a `custom_vjp`'s `bwd`) with that
function's key beside. JAX makes such rules afresh on every trace, so a jaxpr holding one (e.g.
`jax.nn.relu`) may only ever equal itself: a recompile, never a wrong answer. Jaxprs are immutable
by JAX's own convention (JAX caches on them by identity), so a key computed once stays valid, with
one exception: a NumPy literal or constant may be the user's own array, held by reference, which the
user may write; the keys layer watches such an array and never substitutes a jaxpr holding one
(`changeable`, `may_change`). Anything unexpected (an unknown variable, an unreadable constant)
gives `None`: the caller then falls back to identity, which is always safe.
"""

import enum
import functools
import hashlib
import struct
import types
from collections.abc import Callable, Hashable
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.extend import core as jcore

from ._origin import library_class, library_code
from ._per_class import PerClass, type_ids


JAXPR = _JAXPR = jcore.Jaxpr
CLOSED_JAXPR = _CLOSED = jcore.ClosedJaxpr
_LITERAL = jcore.Literal
PRIMITIVE = jcore.Primitive
try:
    _DROP = jcore.DropVar
except AttributeError:  # JAX < 0.6 has it only in `jax.core` (deprecated later) and here.
    from jax._src.core import DropVar as _DROP  # noqa: N814


class _Unkeyable(Exception):
    pass


def jaxpr_key(
    obj: Any,
    key_of: Callable[[Any], Hashable],
    ignore: frozenset = frozenset(),
    memo: dict | None = None,
    changeable: Callable[[Any, bytes], None] | None = None,
    opaque: Callable[[Any], Hashable] | None = None,
) -> Hashable | None:
    """The value key of a `Jaxpr` or `ClosedJaxpr`, or `None` for anything else (or a jaxpr
    that cannot be keyed by value).

    **Arguments:**

    - `obj`: any object.
    - `key_of`: the key of any other value met inside (equation parameters, literal values,
        abstract values), e.g. `eqxstable.stable_key` or the keys layer's own recursion.
    - `ignore`: `(primitive name, parameter name)` pairs left out of the key (the jit layer
        leaves out what only transformations read, as a `custom_jvp`'s rule).
    - `memo`: a dict in which the keys of sub-jaxprs met are kept by identity, so that a
        sub-jaxpr met many times (JAX caches the jaxpr of a function traced again with the same
        types: 50 layers calling `jax.nn.relu`) is keyed once. It holds the jaxprs it keys.
    - `changeable`: called with each NumPy literal or constant that can be written in place
        (`may_change`) and its bytes, so that the caller watches it and never substitutes the
        jaxpr (the keys layer); a literal or constant of an array type this does not know then
        makes the jaxpr unkeyable. Without it (the jit layer's fingerprint, which compares a
        trace just made), arrays are keyed by their bytes alone.

    **Returns:**

    A hashable key, equal for two jaxprs exactly when they run the same equations on the same
    kinds of values; or `None`.
    """
    if not isinstance(obj, (_JAXPR, _CLOSED)):
        return None
    try:
        return _key(obj, key_of, (ignore, {} if memo is None else memo, changeable, opaque))
    except _Unkeyable:
        return None


def _key(obj: Any, key_of: Callable[[Any], Hashable], options: tuple) -> Hashable:
    memo = options[1]
    known = memo.get(id(obj))
    if known is not None and known[0] is obj:
        return known[1]
    key = _uncached_key(obj, key_of, options)
    memo[id(obj)] = (obj, key)
    return key


def _uncached_key(obj: Any, key_of: Callable[[Any], Hashable], options: tuple) -> Hashable:
    if isinstance(obj, _CLOSED):
        consts = tuple(_value(c, key_of, options[2]) for c in obj.consts)
        return ("ClosedJaxpr", _jaxpr(obj.jaxpr, key_of, options), consts)
    return _jaxpr(obj, key_of, options)


def _jaxpr(jaxpr: Any, key_of: Callable[[Any], Hashable], options: tuple) -> Hashable:
    ignore, memo, changeable, _ = options
    positions: dict[int, int] = {}

    def bind(var: Any) -> Hashable:
        if isinstance(var, _DROP):
            return ("drop", _known_aval(var.aval, key_of, memo))
        positions[id(var)] = len(positions)
        return ("var", _var_type(var, key_of, memo))

    def use(atom: Any) -> Hashable:
        if isinstance(atom, _LITERAL):
            value = _value(atom.val, key_of, changeable)
            return ("literal", value, _known_aval(atom.aval, key_of, memo))
        position = positions.get(id(atom))
        if position is None:
            raise _Unkeyable
        return ("ref", position)

    constvars = tuple(map(bind, jaxpr.constvars))
    invars = tuple(map(bind, jaxpr.invars))
    eqns = []
    for eqn in jaxpr.eqns:
        ins = tuple(map(use, eqn.invars))
        primitive = getattr(eqn.primitive, "name", None)
        params = tuple(
            (name, _param(value, key_of, options))
            for name, value in sorted(eqn.params.items())
            if not ignore or (primitive, name) not in ignore
        )
        effects = key_of(frozenset(eqn.effects))
        outs = tuple(map(bind, eqn.outvars))
        ctx = eqn.ctx
        known = memo.get(id(ctx))
        if known is not None and known[0] is ctx:
            context = known[1]
        else:
            context = _context(ctx, key_of)
            memo[id(ctx)] = (ctx, context)
        eqns.append((key_of(eqn.primitive), ins, params, effects, context, outs))
    outvars = tuple(map(use, jaxpr.outvars))
    return (
        "Jaxpr",
        constvars,
        invars,
        tuple(eqns),
        outvars,
        key_of(frozenset(jaxpr.effects)),
        key_of(getattr(jaxpr, "is_high", False)),
    )


def _context(context: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    # A `JaxprEqnContext` holds its settings in slots; one left unset is keyed as such. A context
    # with a `__dict__` (state this does not know of) is keyed as it is, by the caller.
    t = type(context)
    if hasattr(context, "__dict__"):
        return key_of(context)
    settings = tuple(
        (name, _setting(getattr(context, name, _UNSET), key_of)) for name in _slot_names(t)
    )
    return (key_of(t), settings)


_UNSET = object()
# The slots of each class (all of its MRO's but `__weakref__`), found once per class.
_SLOT_NAMES: PerClass[tuple[str, ...]] = PerClass()


def _slot_names(t: type) -> tuple[str, ...]:
    names = _SLOT_NAMES.get(id(t))
    if names is None:
        found = []
        for c in t.__mro__:
            slots = c.__dict__.get("__slots__", ())
            found += [slots] if isinstance(slots, str) else list(slots)
        names = tuple(name for name in found if name != "__weakref__")
        _SLOT_NAMES.put(t, names)
    return names


def _setting(value: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    if value is _UNSET:
        return ("unset",)
    if type(value) is dict:
        # XLA metadata: JAX's own, never changed once the context holds it.
        return ("dict", tuple((key_of(k), key_of(v)) for k, v in value.items()))
    return key_of(value)


def _var_type(var: Any, key_of: Callable[[Any], Hashable], memo: dict) -> Hashable:
    # Beside the abstract value, a variable may carry "quasi-dynamic data" (mutable arrays);
    # most carry none, which is keyed without calling `key_of` (a 1-tuple: never a pair).
    initial = getattr(var, "initial_qdd", None)
    final = getattr(var, "final_qdd", None)
    extra = _NO_QDD if initial is None and final is None else (key_of(initial), key_of(final))
    return (_known_aval(var.aval, key_of, memo), extra)


_NO_QDD = ("no qdd",)


def _known_aval(aval: Any, key_of: Callable[[Any], Hashable], memo: dict) -> Hashable:
    # Most variables of a jaxpr share a few aval objects (JAX reuses them along a computation):
    # each is keyed once, kept by identity in `memo` with the aval itself (so its `id` is not
    # reused meanwhile). Avals are immutable, as JAX's own caches assume.
    known = memo.get(id(aval))
    if known is not None and known[0] is aval:
        return known[1]
    key = _aval(aval, key_of)
    memo[id(aval)] = (aval, key)
    return key


def _aval(aval: Any, key_of: Callable[[Any], Hashable], depth: int = 0) -> Hashable:
    """An abstract value (`ShapedArray`) by its type and the value of each of its slots.

    JAX treats avals as immutable values, but newer JAX (0.12, measured) gives `ShapedArray` no
    `__eq__` of its own and interns only some of them, so two jaxprs of one computation hold
    different aval objects: keyed by identity, they were never equal. Every slot is keyed (a
    slot caching a derived aval of the same type, `_stripped_weak_type`, by this same rule), so
    two avals share a key only when all their state is equal. An aval with a `__dict__` (state
    this does not know of) is keyed by `key_of`, as before."""
    t = type(aval)
    if hasattr(aval, "__dict__") or depth > 2:
        return key_of(aval)
    settings = []
    for name in _slot_names(t):
        value = getattr(aval, name, _UNSET)
        if type(value) is t:
            settings.append((name, _aval(value, key_of, depth + 1)))
        else:
            settings.append((name, _setting(value, key_of)))
    return ("aval", key_of(t), tuple(settings))


def _param(value: Any, key_of: Callable[[Any], Hashable], options: tuple) -> Hashable:
    """An equation's parameter, keyed by value only where its kind is known to be a value
    (`_value_param`); anything else (a `WrappedFun`, a callback's wrapper, an object of a class
    this does not know) by `opaque`, this very object, never walked. JAX makes such objects
    while it traces, and they may hold the live trace itself (a `custom_jvp`'s rule is a thunk
    over the `DynamicJaxprTrace` that made the jaxpr): walking them is slow, and what they hold
    is JAX's business, not the program's value."""
    # Sub-jaxprs (of `pjit`, `cond`, `scan`, `custom_jvp_call`...) are keyed here, whether or not
    # `key_of` knows about jaxprs; they sit directly in a parameter or in a tuple of them.
    if isinstance(value, (_JAXPR, _CLOSED)):
        return ("sub", _key(value, key_of, options))
    if type(value) is tuple:
        return ("tuple", tuple(_param(v, key_of, options) for v in value))
    # A parameter holding a Python scalar (a fill value, a bound) by its bits, as a literal.
    scalar = _scalar(value, key_of)
    if scalar is not None:
        return scalar
    opaque = options[3]
    if opaque is None or _value_param(value):
        return key_of(value)
    if _WRAPPED_FUN is not None and type(value) is _WRAPPED_FUN:
        # A transformation rule (`jvp_jaxpr_fun`, `fwd_jaxpr_thunk`, `bwd`): itself, and the
        # function it wraps (`.f`, in JAX 0.5.3 as in 0.10) where that is the user's own (a
        # `custom_vjp`'s `bwd`, run at every transpose: the globals it reads are in its key).
        # JAX's own thunks (the memoised JVP of a `custom_jvp`, traced once per object) hold
        # the trace that made them: not walked.
        wrapped = getattr(value, "f", None)
        user = type(wrapped) is types.FunctionType and not library_code(wrapped.__code__)
        return ("wrapped fun", opaque(value), key_of(wrapped) if user else None)
    return ("opaque", opaque(value))


# Kinds of parameter keyed by value (by `key_of`, which keys them by the keys layer's rules): the
# allowlist. Exact tuples and jaxprs are keyed item by item in `_param` itself.
_VALUE_PARAMS = (
    str,
    bytes,
    type(None),
    np.dtype,
    np.generic,
    enum.Enum,
    # Callables by the contract's rule for them (`K-function`, `K-partial`, `K-method`): a
    # lineax operator's functions in an Equinox primitive's static parameter.
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    functools.partial,
)


def _value_param(value: Any) -> bool:
    t = type(value)
    if isinstance(value, _VALUE_PARAMS) or id(t) in _VALUE_TYPES:
        return True
    if isinstance(value, tuple):
        # A NamedTuple of JAX's (`ConvDimensionNumbers`, `GatherDimensionNumbers`) or a
        # `PartitionSpec`: a value when all it holds is.
        return all(isinstance(v, (_JAXPR, _CLOSED)) or _value_param(v) for v in value)
    if isinstance(value, eqx.Module):
        return True  # Keyed by its fields, as a static argument is (`K-frozen-dataclass`).
    known = _JAX_VALUE_TYPES.get(id(t))
    if known is None:
        # JAX's own immutable values (abstract values, shardings, meshes, layouts, effects,
        # tree structures): hashable, no function, no array. JAX's by where its code lives
        # (`library_class`), not only by the `__module__` a user's class may claim.
        module = getattr(t, "__module__", "") or ""
        known = (
            (module == "jax" or module.startswith(("jax.", "jaxlib")))
            and library_class(t)
            and not callable(value)
            and not isinstance(value, jax.Array)
            and getattr(t, "__hash__", None) is not None
            and t is not _WRAPPED_FUN
        )
        _JAX_VALUE_TYPES.put(t, known)
    return known


# By the types' identities (`type_ids`), and per class held weakly (`PerClass`): a user's
# metaclass may call its class equal to one of these.
_VALUE_TYPES = type_ids((jax.tree_util.PyTreeDef, frozenset))
_JAX_VALUE_TYPES: PerClass[bool] = PerClass()
try:  # The class of a transformation rule's thunk (`jax.extend` has it from JAX 0.4.14).
    from jax.extend.linear_util import WrappedFun as _WRAPPED_FUN
except ImportError:  # pragma: no cover
    _WRAPPED_FUN = None


# `(dtype.str, dtype.name)` by the dtype's identity, held with it: NumPy computes `name` in Python
# on every read, and a jaxpr's literals share a few dtypes.
_DTYPE_NAMES: dict[int, tuple[np.dtype, tuple[str, str]]] = {}


def _dtype_names(dtype: np.dtype) -> tuple[str, str]:
    known = _DTYPE_NAMES.get(id(dtype))
    if known is None or known[0] is not dtype:
        if len(_DTYPE_NAMES) > 1024:  # Dtypes made afresh (structured ones): no growth.
            _DTYPE_NAMES.clear()
        known = _DTYPE_NAMES[id(dtype)] = (dtype, (dtype.str, dtype.name))
    return known[1]


try:  # JAX >= 0.8 (measured on 0.10): a Python scalar in a jaxpr carries its dtype.
    from jax._src.literals import typed_scalar_types as _typed

    _TYPED_SCALARS: frozenset[int] = type_ids(_typed)
except ImportError:  # JAX 0.5.3 (the floor) puts plain `int`/`float`/`complex` in literals.
    _TYPED_SCALARS = frozenset()
# Python's own scalars, keyed exactly here whatever the caller's `key_of` does with them. By
# identity (`type_ids`), as the sets above and below: a metaclass may call its class `int`.
_PLAIN_SCALARS = type_ids((bool, int, float, complex))


def _scalar(value: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    """A Python scalar (JAX's typed ones included) by its exact type (a builtin or JAX's class,
    constant), its exact value (a float's or a complex's IEEE bits: `0.0` and `-0.0`, two NaN
    payloads differ) and, for JAX's typed scalars, its dtype; `None` for anything else (a NumPy
    scalar is an array, an enum member is the caller's). JAX's `TypedFloat(-0.0) ==
    TypedFloat(0.0)`, so a key by its `==` would run a program compiled for `1 / -0.0` where
    `1 / 0.0` was traced. Another subclass of a number (state this does not know of) makes the
    jaxpr unkeyable."""
    t = type(value)
    if id(t) in _PLAIN_SCALARS:
        dtype: Hashable = None
    elif id(t) in _TYPED_SCALARS:
        # `aval` is derived from `dtype` (always weakly typed); `dtype` is keyed as what it is.
        dtype = key_of(value.dtype)
    elif isinstance(value, (np.generic, enum.Enum)):
        return None
    elif isinstance(value, (int, float, complex)):
        raise _Unkeyable
    else:
        return None
    if isinstance(value, float):
        bits: Hashable = struct.pack("<d", value)
    elif isinstance(value, complex):
        bits = struct.pack("<dd", value.real, value.imag)
    else:
        bits = int(value)
    return ("python scalar", t, bits, dtype)


# Bytes of a constant held as they are in a key up to this size; a digest beyond it.
_BYTES_HELD = 4096


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def _value(
    value: Any,
    key_of: Callable[[Any], Hashable],
    changeable: Callable[[Any, bytes], None] | None = None,
) -> Hashable:
    """A literal's or a constant's value: a Python scalar (`_scalar`) by its exact type, bits and
    dtype; an array (JAX's, NumPy's, or the array type JAX wraps literals in) by its exact type,
    dtype, shape and bytes, handed to `changeable` as well where it can be written in place;
    anything else by `key_of`."""
    scalar = _scalar(value, key_of)
    if scalar is not None:
        return scalar
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        if changeable is not None and not isinstance(value, (np.ndarray, np.generic, jax.Array)):
            # An array type this does not know: its bytes may not be all its state.
            raise _Unkeyable
        try:
            array = np.asarray(value)
        except Exception as e:
            raise _Unkeyable from e
        if array.dtype.hasobject:
            raise _Unkeyable
        data = array.tobytes()
        if changeable is not None and may_change(value):
            changeable(value, data)
        # The name as well as `dtype.str`, which is `<V2` for bfloat16 and every other 2-byte
        # extension type. Large values by a cryptographic digest of their bytes: a key is held
        # as long as its program, and a copy of every large constant would double its memory.
        held = data if len(data) <= _BYTES_HELD else ("blake2b", _digest(data))
        return ("array", key_of(type(value)), *_dtype_names(array.dtype), array.shape, held)
    return key_of(value)


try:  # JAX >= 0.8 wraps a literal's NumPy value in its own subclass (no state of its own but
    # the abstract value, keyed beside it).
    from jax._src.literals import TypedNdArray as _TypedNdArray

    _PLAIN_ARRAYS: frozenset[int] = type_ids((np.ndarray, _TypedNdArray))
except ImportError:  # JAX 0.5.3 (the floor) holds plain NumPy arrays.
    _PLAIN_ARRAYS = type_ids((np.ndarray,))


def may_change(value: Any) -> bool:
    """Whether a literal's or a constant's array can be written in place, now or later.

    A `jax.Array` cannot, nor a NumPy scalar (but a record, `np.void`). A NumPy array can,
    unless it and every array it views are read-only and its memory belongs to a `bytes` object
    (a read-only array that owns its memory can be made writable again by whoever holds it).
    JAX keeps a NumPy value it traces by reference: a 0-d array the traced function closes over
    is itself the literal (JAX 0.5.3) or viewed by it (0.10), so writing the user's array
    changes what the jaxpr computes, even run eagerly; and the `1.0` of `x + 1.0`, which JAX
    makes afresh and never writes, cannot be told apart from it. Any other array type (a
    subclass may hold state of its own) can."""
    if isinstance(value, jax.Array):
        return False
    if isinstance(value, np.generic):
        # A NumPy scalar is immutable, but for a structured one (`np.void`), a view of a record.
        return isinstance(value, np.void)
    if id(type(value)) not in _PLAIN_ARRAYS:
        return True
    a: Any = value
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return True
        a = a.base
    return type(a) is not bytes
