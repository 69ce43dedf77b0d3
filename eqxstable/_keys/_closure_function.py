"""Equinox's closures as pytrees (`equinox.internal.closure_to_pytree`, which optimistix applies
to optax's optimisers): the function a `_Closure` runs, with its cells made afresh per call
(`K-closure-function`, a row of the table in `README.md`).
"""

import sys
import types
from typing import Any

from ._context import compound, Ctx, key
from ._fallbacks import identity
from ._state import dict_state, object_state


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
