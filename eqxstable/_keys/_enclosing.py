"""The code objects lexically enclosing a function, found from its qualified name in its globals
(through decorators: `__wrapped__`, a function held in a closure, Hypothesis's `inner_test`) and
checked by identity, so that a wrong candidate can only fail to match. `_cells.py` reads the
enclosing code to decide whether a closure cell can still be rebound.
"""

import types
from collections.abc import Iterator
from typing import Any

from ._code import _nested


def _codes_of(obj: Any, depth: int = 0) -> list[types.CodeType]:
    """The code objects an object found by a qualified name may hold: a function's (through
    decorators that set `__wrapped__`), a method's, or every method's of a class."""
    for _ in range(64):
        inner = getattr(obj, "__wrapped__", None) or getattr(obj, "__func__", None)
        if inner is None or inner is obj:
            break
        obj = inner
    if isinstance(obj, property):
        return [c for f in (obj.fget, obj.fset, obj.fdel) for c in _codes_of(f, depth)]
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        return [code]
    if isinstance(obj, type) and depth < 2:
        return [c for v in vars(obj).values() for c in _codes_of(v, depth + 1)]
    return []


def _path_to(top: types.CodeType, target: types.CodeType) -> list[types.CodeType] | None:
    """The chain of code objects from `top` down to `target` (found by identity), or `None`."""
    if top is target:
        return [top]
    for child in _nested(top):
        path = _path_to(child, target)
        if path is not None:
            return [top, *path]
    return None


def _enclosing(f: types.FunctionType) -> list[types.CodeType] | None:
    """The code objects lexically enclosing `f`'s code, outermost first, found from its qualified
    name in its globals and checked by identity (a redefined outer function is not found)."""
    code = f.__code__
    qualname = getattr(code, "co_qualname", None) or getattr(f, "__qualname__", "")
    if not isinstance(qualname, str) or ".<locals>." not in qualname:
        return None
    head, *_ = qualname.split(".<locals>.")
    first, *rest = head.split(".")
    obj = f.__globals__.get(first)
    for name in rest:
        obj = getattr(obj, name, None)
    for top in _tops(obj):
        path = _path_to(top, code)
        if path is not None:
            return path[:-1]
    return None


# How many wrappers deep `_tops` looks for the function a decorator wraps.
_WRAPPER_DEPTH = 3


def _tops(obj: Any) -> Iterator[types.CodeType]:
    """The code objects that the object named by a qualified name may run: its own
    (`_codes_of`), then those of the functions it wraps without `__wrapped__`, breadth first, a
    few wrappers deep: the functions its closure holds (a decorator written without
    `functools.wraps`), and Hypothesis's `inner_test` (`@given` leaves in the module a generated
    function whose closure holds a wrapper, which finds the test as `.hypothesis.inner_test`).
    Whatever is found is checked by identity (`_path_to`), so a wrong candidate can only fail to
    match."""
    seen: set[int] = set()
    level = [obj]
    for depth in range(_WRAPPER_DEPTH + 1):
        deeper = []
        for o in level:
            if id(o) in seen:
                continue
            seen.add(id(o))
            yield from _codes_of(o)
            if depth < _WRAPPER_DEPTH and isinstance(o, types.FunctionType):
                deeper += _wrapped_by(o)
        level = deeper


def _wrapped_by(f: types.FunctionType) -> list[types.FunctionType]:
    found = []
    for cell in f.__closure__ or ():
        try:
            held = cell.cell_contents
        except ValueError:  # An empty cell.
            continue
        if isinstance(held, types.FunctionType):
            found.append(held)
    # A function's own `__dict__` (no code runs to read it); Hypothesis's handle is a plain
    # object, whose attributes are read from its `__dict__` too.
    handle = f.__dict__.get("hypothesis")
    try:
        inner = vars(handle).get("inner_test") if handle is not None else None
    except Exception:  # No `__dict__`: not Hypothesis's.
        inner = None
    if isinstance(inner, types.FunctionType):
        found.append(inner)
    return found
