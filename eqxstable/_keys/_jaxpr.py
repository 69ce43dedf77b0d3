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
  equation's outputs) and its abstract value; dropped outputs as such;
- literals by their exact type and bits (through the key function) and abstract value;
- the jaxpr's effects; a `ClosedJaxpr`'s constants by dtype, shape and bytes.

Left out, as they never change what runs: source locations and debug info (names of arguments
and results). A parameter that is itself a Python callable (a `custom_jvp`'s rule, a callback's
function) is keyed by `key_of` like any value; JAX makes some of those afresh on every trace, so a
jaxpr holding one (e.g. `jax.nn.relu`) may only ever equal itself: a recompile, never a wrong
answer. Jaxprs are immutable by JAX's own convention (JAX caches on them by identity), so a
key computed once stays valid. Anything unexpected (an unknown variable, an unreadable constant)
gives `None`: the caller then falls back to identity, which is always safe.
"""

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
from jax.extend import core as jcore


JAXPR = _JAXPR = jcore.Jaxpr
CLOSED_JAXPR = _CLOSED = jcore.ClosedJaxpr
_LITERAL = jcore.Literal
try:
    _DROP = jcore.DropVar
except AttributeError:  # JAX < 0.6 has it only in `jax.core` (deprecated later) and here.
    from jax._src.core import DropVar as _DROP  # noqa: N814


class _Unkeyable(Exception):
    pass


def jaxpr_key(obj: Any, key_of: Callable[[Any], Hashable]) -> Hashable | None:
    """The value key of a `Jaxpr` or `ClosedJaxpr`, or `None` for anything else (or a jaxpr
    that cannot be keyed by value).

    **Arguments:**

    - `obj`: any object.
    - `key_of`: the key of any other value met inside (equation parameters, literal values,
        abstract values), e.g. `eqxstable.stable_key` or the keys layer's own recursion.

    **Returns:**

    A hashable key, equal for two jaxprs exactly when they run the same equations on the same
    kinds of values; or `None`.
    """
    if not isinstance(obj, (_JAXPR, _CLOSED)):
        return None
    try:
        return _key(obj, key_of)
    except _Unkeyable:
        return None


def _key(obj: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    if isinstance(obj, _CLOSED):
        consts = tuple(_value(c, key_of) for c in obj.consts)
        return ("ClosedJaxpr", _jaxpr(obj.jaxpr, key_of), consts)
    return _jaxpr(obj, key_of)


def _jaxpr(jaxpr: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    positions: dict[int, int] = {}

    def bind(var: Any) -> Hashable:
        if isinstance(var, _DROP):
            return ("drop", key_of(var.aval))
        positions[id(var)] = len(positions)
        return ("var", _var_type(var, key_of))

    def use(atom: Any) -> Hashable:
        if isinstance(atom, _LITERAL):
            return ("literal", _value(atom.val, key_of), key_of(atom.aval))
        position = positions.get(id(atom))
        if position is None:
            raise _Unkeyable
        return ("ref", position)

    constvars = tuple(map(bind, jaxpr.constvars))
    invars = tuple(map(bind, jaxpr.invars))
    eqns = []
    for eqn in jaxpr.eqns:
        ins = tuple(map(use, eqn.invars))
        params = tuple(
            (name, _param(value, key_of)) for name, value in sorted(eqn.params.items())
        )
        effects = key_of(frozenset(eqn.effects))
        outs = tuple(map(bind, eqn.outvars))
        context = _context(eqn.ctx, key_of)
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
    names = []
    for c in t.__mro__:
        slots = c.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    settings = tuple(
        (name, _setting(getattr(context, name, _UNSET), key_of))
        for name in names
        if name != "__weakref__"
    )
    return (key_of(t), settings)


_UNSET = object()


def _setting(value: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    if value is _UNSET:
        return ("unset",)
    if type(value) is dict:
        # XLA metadata: JAX's own, never changed once the context holds it.
        return ("dict", tuple((key_of(k), key_of(v)) for k, v in value.items()))
    return key_of(value)


def _var_type(var: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    # Beside the abstract value, a variable may carry "quasi-dynamic data" (mutable arrays).
    extra = tuple(key_of(getattr(var, name, None)) for name in ("initial_qdd", "final_qdd"))
    return (key_of(var.aval), extra)


def _param(value: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    # Sub-jaxprs (of `pjit`, `cond`, `scan`, `custom_jvp_call`...) are keyed here, whether or not
    # `key_of` knows about jaxprs; they sit directly in a parameter or in a tuple of them.
    if isinstance(value, (_JAXPR, _CLOSED)):
        return ("sub", _key(value, key_of))
    if type(value) is tuple and any(isinstance(v, (_JAXPR, _CLOSED)) for v in value):
        return ("subs", tuple(_param(v, key_of) for v in value))
    return key_of(value)


def _value(value: Any, key_of: Callable[[Any], Hashable]) -> Hashable:
    """A literal's or a constant's value: an array (JAX's, NumPy's, or the array type JAX wraps
    literals in) by its exact type, dtype, shape and bytes; anything else by `key_of`."""
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        try:
            array = np.asarray(value)
        except Exception as e:
            raise _Unkeyable from e
        if array.dtype.hasobject:
            raise _Unkeyable
        # The name as well as `dtype.str`, which is `<V2` for bfloat16 and every other 2-byte
        # extension type.
        return (
            "array",
            key_of(type(value)),
            array.dtype.str,
            array.dtype.name,
            array.shape,
            array.tobytes(),
        )
    return key_of(value)
