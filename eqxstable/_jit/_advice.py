"""What a changed static value means, and what to do about it: the reason of a miss whose static
value is a function (another function or definition, the same definition over a new captured
object, or reading another value), and the advice for a value a function reads that was
rebound after it was used.

The words for where two keys differ come from `_describe.py`; this file chooses the kind of the
miss and the fix that fits it.
"""

import dis
import types
from typing import Any

from .._compat import code_qualname
from .._keys import FunctionKey, Identity, Key, MutableKey
from ._describe import _cell, _place, _where, describe_change, difference, render, render_pair, Step


def _writes(code: Any, step: Step) -> bool:
    """Whether `code` (or a function nested in it) assigns the variable `step` names: a
    `global n; n += 1` or `nonlocal n; n += 1` counter of the function's own runs."""
    op = "STORE_GLOBAL" if step.kind == "global" else "STORE_DEREF"
    stack = [code]
    while stack:
        c = stack.pop()
        if any(i.opname == op and i.argval == step.name for i in dis.get_instructions(c)):
            return True
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return False


def rebound_advice(old: Any, new: Any) -> str:
    """What to do about a value a function reads that was rebound after it was used (the
    function traced again): advice that fits the value, as a clause.

    **Arguments:**

    - `old`, `new`: the function's key before and after the change.

    **Returns:**

    A clause such as "pass what changes as an argument instead".
    """
    steps, a, b = difference(old, new)
    last = steps[-1] if steps else None
    if last is not None and last.kind in ("global", "captured") and last.code is not None:
        if _writes(last.code, last):
            return (
                f"`{last.name}` is assigned by `{last.owner}` itself (a count of its calls or "
                "traces?), and changing it from outside (a reset) is a change of what the "
                "function reads; count in a variable the function alone changes (`nonlocal n; n "
                "+= 1` in a closure, or `global n; n += 1`, which eqxstable ignores), or expect "
                "this recompile"
            )
    if type(a) is FunctionKey or type(b) is FunctionKey:
        return (
            "a function it calls was defined again (a re-run notebook cell, an edited helper): "
            "its code may have changed, so this recompile is expected"
        )
    return "pass what changes as an argument instead (an array), or keep it fixed"


def another_function(path: str, before: str, after: str, same_name: bool) -> str:
    if same_name:
        return (
            f"`{path}` was defined again: {before} -> {after} (a re-run notebook cell, or an "
            "edited definition); another definition compiles its own program, so this "
            "recompile is expected. If the definition did not change, define it once (outside "
            "the cell or loop that runs again)."
        )
    return (
        f"`{path}` is another function: {before} -> {after}; each function compiles its own "
        "program, which is expected when you switch it on purpose (a sweep over activations); "
        "otherwise pass the same function on every call."
    )


def function_change(path: str, old: Key, new: Key) -> tuple[str, str] | None:
    """`(kind, reason)` for two keys of plain Python functions, else `None`."""
    a, b = old.parts, new.parts
    if type(a) is not FunctionKey or type(b) is not FunctionKey:
        return None
    if a.code != b.code:
        return "static", another_function(path, _where(a.code), _where(b.code), _again(a, b))
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
            (cx, _), (cy, _) = _cell(x), _cell(y)
            if cx is None or cy is None or cx != cy:
                return "identity", (
                    f"`{path}` is {where}, but the `{name}` it captures is another variable (a "
                    "loop variable, or one that can be reassigned), compared by identity because "
                    "it could change later; build the function in a factory (`def make(v): "
                    "return lambda x: ...`) or use `es.StableModule`/`es.intern`."
                )
        if type(x) is MutableKey or type(y) is MutableKey:
            return "identity", (
                f"`{path}` is {where}, but the `{name}` it captures is a new object "
                f"({render(x)} -> {render(y)}), compared by identity because it could change "
                "later; capture an immutable value (a tuple, a frozen dataclass), build it "
                "once, or use `es.StableModule`/`es.intern`."
            )
        steps, inner_a, inner_b = difference(a, b)
        if type(inner_a) is MutableKey or type(inner_b) is MutableKey:
            return "identity", (
                f"`{path}` is {where}, but {_place(steps, code_qualname(b.code))} is a new "
                f"object ({render_pair(inner_a, inner_b)}), compared by identity because it "
                "could change later; capture an immutable value (a tuple, a frozen dataclass), "
                "build it once, or use `es.StableModule`/`es.intern`."
            )
        if any(step.code is not None and _in_optax(step.code) for step in steps):
            return "static", (
                f"`{path}` is {where}, but {describe_change(a, b, rebuilt=True)}; an optax "
                "hyperparameter is a constant of the optimiser's functions, so each value "
                "compiles its own program: build the optimiser with "
                "`optax.inject_hyperparams(optax.adam)(learning_rate=...)` to make it an array "
                "of the optimiser state instead, or expect one compile per value."
            )
        return "static", (
            f"`{path}` is {where}, but {describe_change(a, b, rebuilt=True)}; each distinct "
            "captured value compiles its own program: if it is a number that changes from run "
            "to run, pass it as an argument (an array) instead; if the recompile is wanted (a "
            "new setting), nothing needs to change."
        )
    if a.globals != b.globals:
        return "static", f"`{path}` is {where}, but {describe_change(a, b, rebuilt=True)}."
    if (a.defaults, a.kwdefaults) != (b.defaults, b.kwdefaults):
        return "static", (
            f"`{path}` is {where}, but {describe_change(a, b, rebuilt=True)}; pass them as "
            "arguments instead."
        )
    if a.attrs != b.attrs:
        return "static", f"`{path}` is {where}, but {describe_change(a, b, rebuilt=True)}."
    return None


def _again(a: FunctionKey, b: FunctionKey) -> bool:
    """Whether two definitions are one definition run again (a re-run notebook cell, whose file
    name changes with each run, or a module executed again): the same qualified name at the
    same line. Two lambdas of one function on two lines are two functions."""
    return code_qualname(a.code) == code_qualname(b.code) and (
        a.code.co_firstlineno == b.code.co_firstlineno
    )


def _in_optax(code: types.CodeType) -> bool:
    return "/optax/" in code.co_filename.replace("\\", "/")


def _is_cell_identity(part: Any) -> bool:
    return type(part) is tuple and len(part) == 2 and type(part[0]) is Identity
