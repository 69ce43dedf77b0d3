"""Saying in words how two stable keys of functions differ.

"function <lambda> at 0x7f.. -> function <lambda> at 0x7f.." does not tell a user what to change.
A function's key records its definition, its globals, its defaults and what it captures, so the
difference can be named: another definition (and where each was written), or the same definition
capturing another value (and which variable).
"""

import struct
import types
from typing import Any

from .._compat import code_qualname
from .._key_types import Equal, Identity, Key, Namespace


_MAX = 40


def _where(code: types.CodeType) -> str:
    return f"`{code_qualname(code)}` defined at {code.co_filename}:{code.co_firstlineno}"


def render(part: Any) -> str:
    """A short, readable rendering of one part of a key."""
    if isinstance(part, Identity):
        obj = part.obj
        kind = "object" if obj is None else f"{type(obj).__name__}"
        prefix = "the module namespace" if isinstance(part, Namespace) else f"a {kind}"
        return f"{prefix} at {hash(part):#x}"
    if isinstance(part, Equal):
        text = repr(part.obj)
    elif isinstance(part, tuple) and part and part[0] == "fn":
        return _where(part[1])
    elif isinstance(part, tuple) and len(part) == 2 and part[0] is float:
        text = repr(struct.unpack("<d", part[1])[0])
    elif isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], type):
        text = f"{part[0].__name__} {part[1]!r}"
    else:
        text = repr(part)
    return text if len(text) <= _MAX else text[: _MAX - 3] + "..."


def function_change(path: str, old: Key, new: Key) -> tuple[str, str] | None:
    """`(kind, reason)` for two keys of plain Python functions, else `None`."""
    a, b = old.parts, new.parts
    if not (type(a) is tuple and type(b) is tuple and a[:1] == ("fn",) == b[:1]):
        return None
    _, code_a, globals_a, defaults_a, kwdefaults_a, cells_a, attrs_a = a
    _, code_b, globals_b, defaults_b, kwdefaults_b, cells_b, attrs_b = b
    if code_a != code_b:
        return "static", (
            f"`{path}` is another function: {_where(code_a)} -> {_where(code_b)}; pass the "
            "same function on every call."
        )
    where = _where(code_b)
    if globals_a != globals_b:
        return "identity", (
            f"`{path}` is {where} again, but from another module namespace (the module was "
            "executed again); import it once."
        )
    for name, x, y in zip(code_b.co_freevars, cells_a, cells_b):
        if x == y:
            continue
        if isinstance(x, Identity) and isinstance(y, Identity):
            return "identity", (
                f"`{path}` is {where}, but the `{name}` it captures is a new object "
                f"({render(x)} -> {render(y)}), compared by identity because it could change "
                "later; capture an immutable value (a tuple, a frozen dataclass) or build it "
                "once, or use `es.StableModule`/`es.intern`."
            )
        return "static", (
            f"`{path}` is {where}, but the `{name}` it captures changed: {render(x)} -> "
            f"{render(y)}; each captured value compiles its own program, so pass the value as "
            "an argument (an array) if it changes often."
        )
    if (defaults_a, kwdefaults_a) != (defaults_b, kwdefaults_b):
        return "static", (
            f"`{path}` is {where}, but its default arguments changed: "
            f"{render(defaults_a)} -> {render(defaults_b)}; pass them as arguments instead."
        )
    if attrs_a != attrs_b:
        return "static", f"`{path}` is {where}, but its attributes changed."
    return None
