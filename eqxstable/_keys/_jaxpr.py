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
allowlist of values (`_jaxpr_params.py`: jaxprs, tuples, scalars, strings, dtypes, enum members,
Python functions, partials, methods, NamedTuples of values, `eqx.Module`s, JAX's own hashable
values); anything else (a `custom_jvp`'s or `custom_vjp`'s rule, a JAX `WrappedFun` that may hold
the live trace that made the jaxpr; a callback's wrapper) is itself, never walked, with the keys
layer's identity (`opaque`); a `WrappedFun` over a user's function (a `custom_vjp`'s `bwd`) with
that function's key beside. JAX makes such rules afresh on every trace, so a jaxpr holding one (e.g.
`jax.nn.relu`) may only ever equal itself: a recompile, never a wrong answer. Jaxprs are immutable
by JAX's own convention (JAX caches on them by identity), so a key computed once stays valid, with
one exception: a NumPy literal or constant may be the user's own array, held by reference, which the
user may write; the keys layer watches such an array and never substitutes a jaxpr holding one
(`changeable`, `_jaxpr_values.may_change`). Anything unexpected (an unknown variable, an unreadable
constant) gives `None`: the caller then falls back to identity, which is always safe.
"""

import types
from collections.abc import Callable, Hashable
from typing import Any

from jax.extend import core as jcore

from ._jaxpr_params import value_param, WRAPPED_FUN
from ._jaxpr_values import scalar_key, Unkeyable, value_key
from ._origin import library_code
from ._per_class import PerClass


JAXPR = _JAXPR = jcore.Jaxpr
CLOSED_JAXPR = _CLOSED = jcore.ClosedJaxpr
_LITERAL = jcore.Literal
PRIMITIVE = jcore.Primitive
try:
    _DROP = jcore.DropVar
except AttributeError:  # JAX < 0.6 has it only in `jax.core` (deprecated later) and here.
    from jax._src.core import DropVar as _DROP  # noqa: N814


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
    except Unkeyable:
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
        consts = tuple(value_key(c, key_of, options[2]) for c in obj.consts)
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
            literal = value_key(atom.val, key_of, changeable)
            return ("literal", literal, _known_aval(atom.aval, key_of, memo))
        position = positions.get(id(atom))
        if position is None:
            raise Unkeyable
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
    (`_jaxpr_params.value_param`); anything else (a `WrappedFun`, a callback's wrapper, an object of
    a class this does not know) by `opaque`, this very object, never walked. JAX makes such objects
    while it traces, and they may hold the live trace itself (a `custom_jvp`'s rule is a thunk over
    the `DynamicJaxprTrace` that made the jaxpr): walking them is slow, and what they hold is JAX's
    business, not the program's value."""
    # Sub-jaxprs (of `pjit`, `cond`, `scan`, `custom_jvp_call`...) are keyed here, whether or not
    # `key_of` knows about jaxprs; they sit directly in a parameter or in a tuple of them.
    if isinstance(value, (_JAXPR, _CLOSED)):
        return ("sub", _key(value, key_of, options))
    if type(value) is tuple:
        return ("tuple", tuple(_param(v, key_of, options) for v in value))
    # A parameter holding a Python scalar (a fill value, a bound) by its bits, as a literal.
    found = scalar_key(value, key_of)
    if found is not None:
        return found
    opaque = options[3]
    if opaque is None or value_param(value):
        return key_of(value)
    if WRAPPED_FUN is not None and type(value) is WRAPPED_FUN:
        # A transformation rule (`jvp_jaxpr_fun`, `fwd_jaxpr_thunk`, `bwd`): itself, and the
        # function it wraps (`.f`, in JAX 0.5.3 as in 0.10) where that is the user's own (a
        # `custom_vjp`'s `bwd`, run at every transpose: the globals it reads are in its key).
        # JAX's own thunks (the memoised JVP of a `custom_jvp`, traced once per object) hold
        # the trace that made them: not walked.
        wrapped = getattr(value, "f", None)
        user = type(wrapped) is types.FunctionType and not library_code(wrapped.__code__)
        return ("wrapped fun", opaque(value), key_of(wrapped) if user else None)
    return ("opaque", opaque(value))
