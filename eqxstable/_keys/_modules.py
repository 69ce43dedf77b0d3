"""Keys of modules read whole (`K-user-module`; a library module is a constant, `K-library-code`):
every name in a user's module, and the class of a module that may serve names in place of its
dict."""

import types
from typing import Any

from ._context import compound, Ctx, key
from ._fallbacks import too_deep
from ._origin import library_module
from ._pure import pure_library
from ._state import dict_state, impure_library
from ._types import Namespace


def served_by_class(t: type, attr: str | None) -> bool:
    """Whether the class `t` of a module, a subclass of `ModuleType`, may serve the attribute
    `attr` (`None`: any attribute but dunders) in place of the module's dict: it holds an
    attribute of that name (a property), or a `__getattribute__` or `__getattr__` of its own."""
    for c in t.__mro__:
        if c is types.ModuleType or c is object:
            continue
        d = c.__dict__
        if "__getattribute__" in d or "__getattr__" in d:
            return True
        if attr in d if attr is not None else any(not (k[:2] == "__" == k[-2:]) for k in d):
            return True
    return False


IMPORT_MADE = frozenset({"__spec__", "__loader__", "__builtins__"})


def module_class(m: types.ModuleType) -> tuple:
    # `m.__class__ = M` can make a class serve names the module's dict does not hold.
    return (type(m),)


def module(m: types.ModuleType, ctx: Ctx, content_ok: bool) -> Any:
    if library_module(m):
        # Read whole by a reader (a global used other than as `m.attr`, a cell, an attribute of
        # a user's module): whatever it then calls must be on the allowlist.
        if ctx.depth > 0 and not pure_library(m):
            return impure_library(m, ctx)
        return Namespace(m)
    return user_module(m, ctx, content_ok)


@compound
def user_module(m: types.ModuleType, ctx: Ctx, content_ok: bool) -> Any:
    """A module of the user's own, read whole (passed on, not just `m.attr`): every name in it,
    and its class where that is not `ModuleType`; one whose class may serve names in place of
    its dict is a key equal to nothing."""
    t = type(m)
    if t is not types.ModuleType and served_by_class(t, None):
        return too_deep(m, ctx)
    d = m.__dict__
    ctx.states.append((d, dict_state, dict_state(d)))
    ctx.states.append((m, module_class, module_class(m)))
    # Every name by value, a private `__scale` and `__version__` too, but the import system's
    # own objects (made afresh by `importlib.reload`): the builtins are read as builtins.
    items = tuple((k, key(v, ctx, False)) for k, v in d.items() if k not in IMPORT_MADE)
    if t is not types.ModuleType:
        return ("module", Namespace(m), items, key(t, ctx, False))
    return ("module", Namespace(m), items)
