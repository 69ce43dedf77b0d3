"""Saying in words how two stable keys differ.

"function <lambda> at 0x7f.. -> function <lambda> at 0x7f.." does not tell a user what to change.
A function's key (`FunctionKey`) records its definition, the globals it reads, its defaults and
what it captures, so the difference can be named: another definition (and where each was
written), or the same definition reading another value (and which variable or global).
"""

import struct
import types
from typing import Any

from .._keys import Equal, FunctionKey, Identity, Key, MutableKey, Namespace


_MAX = 40


def _where(code: types.CodeType) -> str:
    name = getattr(code, "co_qualname", code.co_name)  # `co_qualname` is new in Python 3.11.
    return f"`{name}` defined at {code.co_filename}:{code.co_firstlineno}"


def _safe_repr(obj: Any) -> str:
    try:
        return repr(obj)
    except Exception:
        return f"<{type(obj).__name__} object>"


def render(part: Any) -> str:
    """A short, readable rendering of one part of a key."""
    if isinstance(part, Key):
        part = part.parts
    if isinstance(part, Namespace):
        obj = part.obj
        text = getattr(obj, "__name__", None) or f"a {type(obj).__name__}"
        return text if isinstance(text, str) else f"a {type(obj).__name__}"
    if isinstance(part, Identity):
        obj = part.obj
        kind = "object" if obj is None else type(obj).__name__
        return f"a {kind} at {hash(part):#x}"
    if type(part) is MutableKey:
        return render(part.identity)
    if type(part) is FunctionKey:
        return _where(part.code)
    if isinstance(part, Equal):
        text = _safe_repr(part.obj)
    elif isinstance(part, tuple) and len(part) == 2 and part[0] is float:
        text = repr(struct.unpack("<d", part[1])[0])
    elif isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], type):
        text = f"{part[0].__name__} {_safe_repr(part[1])}"
    else:
        text = _safe_repr(part)
    return text if len(text) <= _MAX else text[: _MAX - 3] + "..."


def _difference(a: Any, b: Any, where: list[str]) -> tuple[list[str], Any, Any]:
    """The innermost parts of two keys that differ, and where they sit, in words."""
    if isinstance(a, Key) and isinstance(b, Key):
        return _difference(a.parts, b.parts, where)
    if type(a) is FunctionKey and type(b) is FunctionKey and a.code == b.code:
        for name, x, y in zip(a.code.co_freevars, a.cells, b.cells):
            if x != y:
                return _difference(x, y, [*where, f"the variable `{name}` it captures"])
        ga, gb = dict(a.globals), dict(b.globals)
        for name in {**ga, **gb}:
            if ga.get(name) != gb.get(name):
                return _difference(
                    ga.get(name), gb.get(name), [*where, f"the global `{name}` it reads"]
                )
        for label, x, y in (
            ("its default arguments", a.defaults, b.defaults),
            ("its keyword defaults", a.kwdefaults, b.kwdefaults),
            ("its attributes", a.attrs, b.attrs),
        ):
            if x != y:
                return [*where, label], x, y
    if type(a) is MutableKey and type(b) is MutableKey and a.identity == b.identity:
        # The same object with other contents: changed in place; which item is not needed.
        return where, a, b
    if type(a) is tuple and type(b) is tuple and len(a) == len(b) and not isinstance(a[0], type):
        diffs = [(x, y) for x, y in zip(a, b) if x != y]
        if len(diffs) == 1:
            return _difference(*diffs[0], where)
    return where, a, b


def describe_change(old: Any, new: Any) -> str:
    """How a static value's key changed, as a clause: "the global `lr` it reads was rebound:
    0.1 -> 0.5", "the list held by the variable `v` it captures was changed in place"."""
    where, a, b = _difference(old, new, [])
    place = " of ".join(reversed(where))
    if type(a) is MutableKey and type(b) is MutableKey and a.identity == b.identity:
        kind = type(a.identity.obj).__name__
        return (
            f"the {kind} held by {place} was changed in place"
            if place
            else (f"the {kind} was changed in place")
        )
    verb = (
        "was rebound" if where and ("variable" in where[-1] or "global" in where[-1]) else "changed"
    )
    return f"{place or 'its value'} {verb}: {render(a)} -> {render(b)}"


def function_change(path: str, old: Key, new: Key) -> tuple[str, str] | None:
    """`(kind, reason)` for two keys of plain Python functions, else `None`."""
    a, b = old.parts, new.parts
    if type(a) is not FunctionKey or type(b) is not FunctionKey:
        return None
    if a.code != b.code:
        return "static", (
            f"`{path}` is another function: {_where(a.code)} -> {_where(b.code)}; pass the "
            "same function on every call."
        )
    where = _where(b.code)
    if a.namespace != b.namespace:
        return "identity", (
            f"`{path}` is {where} again, but from another module namespace (the module was "
            "executed again); import it once."
        )
    for name, x, y in zip(b.code.co_freevars, a.cells, b.cells):
        if x == y:
            continue
        if _is_cell_identity(x) or _is_cell_identity(y):
            return "identity", (
                f"`{path}` is {where}, but the `{name}` it captures is another variable (a loop "
                "variable, or one that can be reassigned), compared by identity because it "
                "could change later; build the function in a factory (`def make(v): return "
                "lambda x: ...`) or use `es.StableModule`/`es.intern`."
            )
        if type(x) is MutableKey or type(y) is MutableKey:
            return "identity", (
                f"`{path}` is {where}, but the `{name}` it captures is a new object "
                f"({render(x)} -> {render(y)}), compared by identity because it could change "
                "later; capture an immutable value (a tuple, a frozen dataclass), build it "
                "once, or use `es.StableModule`/`es.intern`."
            )
        return "static", (
            f"`{path}` is {where}, but the `{name}` it captures changed: {render(x)} -> "
            f"{render(y)}; each captured value compiles its own program, so pass the value as "
            "an argument (an array) if it changes often."
        )
    if a.globals != b.globals:
        return "static", f"`{path}` is {where}, but {describe_change(a, b)}."
    if (a.defaults, a.kwdefaults) != (b.defaults, b.kwdefaults):
        return "static", (
            f"`{path}` is {where}, but its default arguments changed: "
            f"{render(a.defaults)} -> {render(b.defaults)}; pass them as arguments instead."
        )
    if a.attrs != b.attrs:
        return "static", f"`{path}` is {where}, but its attributes changed."
    return None


def _is_cell_identity(part: Any) -> bool:
    return type(part) is tuple and len(part) == 2 and type(part[0]) is Identity
