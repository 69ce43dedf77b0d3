"""Keys of callables other than Python functions: partials, bound methods, builtins, `jax.jit`
functions with all their options, and library objects (a constant, a container, data the program
made, or what Python cannot read). Python functions are keyed by `_functions.py`."""

import functools as ft
import gc
import struct
import types
from collections.abc import Iterable, Mapping, Sequence, Set, Sized
from typing import Any

import jax

from .._compat import jit_parts
from ._classes import own_eq
from ._context import compound, Ctx, key
from ._fallbacks import identity
from ._library_mutable import container, opaque
from ._mutable import mutable
from ._origin import library_code_object, library_constant, library_function
from ._per_class import type_ids
from ._pure import pure_library
from ._state import (
    added_state,
    class_part,
    dict_state,
    extra_attrs,
    hidden_state,
    holds_data,
    impure_library,
    instance_dict,
    slots_of,
    unreadable,
)
from ._types import Identity, MutableKey, Namespace


try:
    # JAX's own `jax.jit`: under `EQX_ON_ERROR=breakpoint` Equinox replaces `jax.jit` with a
    # plain function, whose type would take every Python function for a jitted one.
    from jax._src.api import jit as _jit
except ImportError:  # pragma: no cover - moved: `jax.jit` as it is now.
    _jit = jax.jit

PjitFunction = type(_jit(lambda: None))


# What a partial computes with, read from its C storage through `functools.partial`'s own
# descriptors: a subclass may override `func`, `args` or `keywords` with a property showing
# something else (`class Bound(partial): args = property(lambda self: ())`), and `partial`'s
# `__call__` never reads them.
_FUNC = ft.partial.__dict__["func"].__get__
_ARGS = ft.partial.__dict__["args"].__get__
_KEYWORDS = ft.partial.__dict__["keywords"].__get__


def _partial_state(p: ft.partial) -> tuple:
    return (_FUNC(p), _ARGS(p), *dict_state(_KEYWORDS(p)))


@compound
def partial(p: ft.partial, ctx: Ctx, content_ok: bool) -> Any:
    # `functools.partial` and `jax.tree_util.Partial`: the keywords dict is the partial's own
    # (copied when it was made), so it is keyed by contents, and watched with the function and
    # the arguments. A partial can change in place whatever it holds now: its keywords dict,
    # empty or not (`p.keywords["k"] = 9.0`), and everything through `__setstate__`
    # (`p.__setstate__((g, (4.0,), {}, None))`). So a partial is never substituted by `intern`
    # (`ctx.own_eq`): its equal twin is another object, which the program may change apart.
    # Equal keys still share a program under `es.filter_jit`, whose watch of each object sees
    # such a change and traces again.
    ctx.states.append((p, _partial_state, _partial_state(p)))
    keywords = _KEYWORDS(p)
    ctx.own_eq = True
    # A subclass (one with a `__call__` of its own) is keyed as a class: its methods run.
    return (
        class_part(type(p), ctx),
        key(_FUNC(p), ctx, False),
        key(_ARGS(p), ctx, False),
        tuple((k, key(v, ctx, False)) for k, v in keywords.items()),
        added_state(p, ctx),
    )


@compound
def method(m: types.MethodType, ctx: Ctx, content_ok: bool) -> Any:
    return ("method", key(m.__func__, ctx, False), key(m.__self__, ctx, False))


@compound
def builtin(f: Any, ctx: Ctx, content_ok: bool) -> Any:
    owner = getattr(f, "__self__", None)
    if owner is None or isinstance(owner, types.ModuleType):
        if ctx.depth > 1 and not pure_library(f):
            return impure_library(f, ctx)  # `sys.getrecursionlimit`, `time.time`
        return Namespace(f)
    return ("builtin-method", f.__name__, key(owner, ctx, False))


@compound
def pjit(f: Any, ctx: Ctx, content_ok: bool) -> Any:
    # `jax.jit(fun, **options)` keeps `fun` and every option (JAX internals, read in
    # `_compat.py`): if they move, fall back to identity (`tests/test_compat.py` notices).
    parts = jit_parts(f)
    if parts is None:
        return identity(f, ctx)
    fun, info = parts
    # Its `__dict__` holds, besides the two parts and what `functools.wraps` copied, whatever
    # the program stores there (`STEP.scale = 2.0`): keyed and watched as attributes, and never
    # substituted when it holds data of its own (its twin holds another dict).
    d = instance_dict(f)
    made = tuple([n for n in _JIT_MADE if _jax_made(d.get(n) if d else None)])
    holds_data(f, ctx, _JIT_PARTS + made)
    attrs = extra_attrs(f, ctx, skip=_JIT_PARTS)
    return ("jit", key(fun, ctx, False), key(info, ctx, False), attrs)


# What `jax.jit` stores in its function's `__dict__`: the parts `jit_parts` reads and keys, and
# (JAX < 0.6) the functions it makes over them (`j.lower`), keyed as attributes.
_JIT_PARTS = ("_fun", "_jit_info")
_JIT_MADE = ("lower", "eval_shape", "trace", "_cache_miss")


def _jax_made(v: Any) -> bool:
    # One of JAX's own functions, as `jax.jit` left it (not one the program stored there).
    return type(v) is types.FunctionType and library_function(v)


def library_hashable(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-library-object`, `K-own-eq`: an object of a library class with its own `==`: one of a
    library module's own stateless objects (`jnp.multiply`) is a constant; any other is compared
    by its own `==` (never substituted)."""
    if library_constant(obj):
        return _constant(obj, ctx)
    return own_eq(obj, ctx, content_ok)


def _constant(obj: Any, ctx: Ctx) -> Any:
    # A callable one reached by a reader must be on the allowlist (`np.save`, a dispatcher).
    if ctx.depth > 0 and callable(obj) and not pure_library(obj):
        return impure_library(obj, ctx)
    return Namespace(obj)


def library_object(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-library-object`: an object of a library class with no value semantics. One of a library
    module's own stateless objects (`jax.nn.relu`, a sentinel such as Equinox's `MISSING`) is a
    constant. A mapping, sequence or set (`os.environ`, a `collections.deque`, a weak container)
    is itself and its items, watched. Any other is data the program made at run time (a
    `types.SimpleNamespace`, an `argparse.Namespace`, a `jax.custom_vjp` whose `defvjp` changes a
    rule in place): itself and what it holds now, watched; with nothing Python can read (a C
    object), a callable is itself and anything else a key equal to nothing."""
    if library_constant(obj):
        return _constant(obj, ctx)
    if isinstance(obj, (Mapping, Sequence, Set)):
        return container(obj, ctx, content_ok)
    if getattr(obj, "__dict__", None) is None and not slots_of(type(obj)):
        if isinstance(obj, Sized) and isinstance(obj, Iterable):
            return container(obj, ctx, content_ok)
        if callable(obj):
            return c_callable(obj, ctx, content_ok)
        if hasattr(type(obj), "__get__") or _stateless(type(obj)):
            # A C descriptor of a class (a NamedTuple's field getter), or an object with no
            # storage at all (`object()`): constants.
            return Namespace(obj)
        return opaque(obj, ctx, content_ok)
    if callable(obj) and ctx.depth > 0 and hidden_state(type(obj)) and _referents(obj):
        # A C callable with state Python cannot read, wrapping objects (`np.frompyfunc(pyfn)`):
        # its reader is identity-keyed (`K-opaque`), and what it wraps is keyed and watched, so
        # that the very same reader is a new key once `pyfn`'s globals change.
        return _opaque_wrapper(obj, ctx, content_ok)
    return mutable(obj, ctx, content_ok)


def _referents(obj: Any) -> tuple:
    t = type(obj)
    return tuple([r for r in gc.get_referents(obj) if r is not t])


@compound
def c_callable(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-library-object`: a C callable made at run time (`functools.cmp_to_key(cmp)`,
    `operator.itemgetter(1)`, `operator.methodcaller("f", g)`). It is a constant only if it holds
    nothing: one that wraps a user function (`cmp` reads globals) is itself *and* what it holds,
    as the garbage collector sees it (each keyed as what it is, watched by `is`), so a change
    the wrapped function can see is a new key. It keeps identity: its C fields beyond those
    objects (an `int` in C) cannot be read."""
    held = _referents(obj)
    if all(map(_library_held, held)):
        # Its class, library code, plain values (a slot wrapper's class, `itemgetter(1)`).
        return Namespace(obj)
    ctx.identity = True
    ctx.states.append((obj, _referents, held))
    return MutableKey(Identity(obj), (type(obj), tuple([key(r, ctx, False) for r in held])))


# By identity (`type_ids`): a user's metaclass may call its class equal to `int`.
_PLAIN = type_ids((int, float, complex, str, bytes, bool, type(None)))


def _library_held(x: Any, depth: int = 0) -> bool:
    if id(type(x)) in _PLAIN or library_code_object(x):
        return True
    if (type(x) is tuple or type(x) is frozenset) and depth < 3:
        return all(_library_held(y, depth + 1) for y in x)
    return False


@compound
def _opaque_wrapper(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    held = _referents(obj)
    ctx.states.append((obj, _referents, held))
    return (unreadable(obj, ctx), tuple([key(r, ctx, False) for r in held]))


def _stateless(t: type) -> bool:
    # With no `__dict__` and no slots, only a class of C code can hold state (a lock, an
    # `itertools.count`); `object()` and a Python class's instances hold none. Told apart by the
    # instances' size, not by whether the class is a heap type: a lock is one on every Python,
    # and since Python 3.12 so are `itertools`' classes (3.13 keyed a count as a constant). A
    # weak reference slot inside the object is no state.
    size = t.__basicsize__ - (_POINTER if t.__weakrefoffset__ > 0 else 0)
    return t.__itemsize__ == 0 and size == object.__basicsize__


_POINTER = struct.calcsize("P")
