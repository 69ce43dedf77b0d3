"""Keys of callables: functions (code, globals, cells, defaults), partials, bound methods,
builtins, and `jax.jit` functions with every one of their options."""

import functools as ft
import types
from typing import Any

import jax

from ._compat import jit_parts
from ._key_context import (
    _compound,
    _dict_state,
    _EMPTY_CELL,
    _extra_attrs,
    _identity,
    _items,
    _key,
    _memo,
    _still_valid,
)
from ._key_types import Namespace


_PjitFunction = type(jax.jit(lambda: None))


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
    # `jax.jit(fun, **options)` keeps `fun` and every option (JAX internals, read in `_compat.py`):
    # if they move, fall back to identity (and `tests/test_compat.py` notices).
    parts = jit_parts(f)
    if parts is None:
        return _identity(f, ctx, content_ok)
    fun, info = parts
    return ("jit", _key(fun, ctx, False), _key(info, ctx, False))
