"""What a function's bytecode reads: the globals it loads (and the attributes it reads from
each), whether it may read a namespace whole, and which globals it only bumps as counters.

These are properties of code objects, which never change, so they are computed once per code
object. The analysis only ever answers "maybe" when it cannot prove something, and every "maybe"
costs a recompile, never a wrong answer. Whether a closure cell can still be rebound is
`_cells.py`; the code enclosing a function, `_enclosing.py`.
"""

import dis
import sys
import types
import weakref
from typing import Any, NamedTuple

from ._subscripts import subscripts


_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_ATTRS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})


class Reads(NamedTuple):
    """The globals a code object (and the code nested in it) loads."""

    names: tuple[str, ...]
    # For each global read only as `name.attr` (a module's or class's attribute): those attributes.
    # A global used any other way (called, passed on) is absent here and read whole.
    attrs: dict[str, tuple[str, ...]]
    # For such a global, the chains of two or more attributes read from it (`jax.nn.myact` is
    # `("nn", "myact")`): what is read from a submodule, which may hold the user's own objects.
    deep: dict[str, tuple[tuple[str, ...], ...]] = {}
    # For each global read only as `name[k]`, `k` an `int` constant (`TABLE[3].b`): those `k`
    # (`subscripts`).
    subscripts: dict[str, tuple[int, ...]] = {}


_reads: dict[int, tuple[weakref.ref, Reads]] = {}


def _memo(table: dict, code: types.CodeType, compute: Any) -> Any:
    hit = table.get(id(code))
    if hit is not None and hit[0]() is code:
        return hit[1]
    result = compute(code)
    i = id(code)
    table[i] = (weakref.ref(code, lambda r, i=i: table.pop(i, None)), result)
    return result


def _nested(code: types.CodeType) -> list[types.CodeType]:
    return [c for c in code.co_consts if isinstance(c, types.CodeType)]


def _compute_reads(code: types.CodeType) -> Reads:
    names: dict[str, None] = {}
    attrs: dict[str, set[str] | None] = {}
    chains: dict[str, set[tuple[str, ...]]] = {}
    pending = [code]
    while pending:
        c = pending.pop()
        pending.extend(_nested(c))
        instructions = list(dis.get_instructions(c))
        for i, ins in enumerate(instructions):
            if ins.opname not in _LOADS or not isinstance(ins.argval, str):
                continue
            name = ins.argval
            names[name] = None
            nxt = instructions[i + 1] if i + 1 < len(instructions) else None
            if nxt is not None and nxt.opname in _ATTRS and isinstance(nxt.argval, str):
                seen = attrs.setdefault(name, set())
                if seen is not None:
                    seen.add(nxt.argval)
                chain = _chain(instructions, i + 1)
                if len(chain) > 1:
                    chains.setdefault(name, set()).add(chain)
            else:
                attrs[name] = None  # used whole
    return Reads(
        tuple(names),
        {name: tuple(sorted(seen)) for name, seen in attrs.items() if seen is not None},
        {name: tuple(sorted(c)) for name, c in chains.items() if attrs.get(name) is not None},
        subscripts(code, tuple(names)),
    )


def _chain(instructions: list, at: int) -> tuple[str, ...]:
    # Consecutive attribute loads each read from the object the one before returned.
    out = []
    while at < len(instructions) and instructions[at].opname in _ATTRS:
        if not isinstance(instructions[at].argval, str):
            break
        out.append(instructions[at].argval)
        at += 1
    return tuple(out)


def reads(code: types.CodeType) -> Reads:
    """The globals that `code` loads, with the attributes read from each."""
    return _memo(_reads, code, _compute_reads)


# Attributes through which code reads a namespace whole: a function's globals, a frame's globals,
# locals or builtins (`f.__globals__["c"]`, `sys._getframe().f_globals["c"]`). Which names it reads
# there, and from whose namespace, the bytecode does not show. Likewise a class's live table of
# subclasses (`Term.__subclasses__()`, `eqx.Module.__subclasses__()`: plugin discovery), which
# grows whenever a subclass is defined anywhere and which no key of a class shows. And a
# function's closure cells (`g.__closure__[0].cell_contents`): a cell that `g` only bumps or
# appends to is no part of `g`'s key (`K-counter-cell`, `K-trace-log`), so only `g`'s own code
# may read it.
_NAMESPACE_ATTRS = frozenset(
    {
        "__globals__",
        "f_globals",
        "f_locals",
        "f_builtins",
        "__subclasses__",
        "__closure__",
        "cell_contents",
    }
)
_namespaces: dict[int, tuple[weakref.ref, bool]] = {}


def _compute_namespaces(code: types.CodeType) -> bool:
    pending = [code]
    while pending:
        c = pending.pop()
        pending.extend(_nested(c))
        # An attribute read (`co_names`) or its name as a constant (`getattr(f, "__globals__")`,
        # `operator.attrgetter("f_globals")`).
        if not _NAMESPACE_ATTRS.isdisjoint(c.co_names):
            return True
        if any(type(k) is str and k in _NAMESPACE_ATTRS for k in c.co_consts):
            return True
    return False


def reads_namespaces(code: types.CodeType) -> bool:
    """Whether `code` (or code nested in it) names a function's `__globals__` or closure cells
    (`__closure__`, `cell_contents`), a frame's `f_globals`, `f_locals` or `f_builtins`, or a
    class's `__subclasses__`: it may read any name of any namespace, any cell of any function,
    or any class defined anywhere since."""
    return _memo(_namespaces, code, _compute_namespaces)


#
# Counters: globals that code only bumps.
#

_BUMP_OPS = frozenset({"BINARY_ADD", "INPLACE_ADD", "BINARY_SUBTRACT", "INPLACE_SUBTRACT"})
_BUMP_SIGNS = frozenset({"+", "+=", "-", "-="})


def _is_bump(
    instructions: list, at: int, name: str, load: str = "LOAD_DEREF", store: str = "STORE_DEREF"
) -> bool:
    """Whether `instructions[at:at + 4]` is `name += k` (or `name = name - k`, ...), `k` an int."""
    if at + 3 >= len(instructions):
        return False
    first, const, op, last = instructions[at : at + 4]
    return (
        first.opname == load
        and const.opname in ("LOAD_CONST", "LOAD_SMALL_INT")
        and type(const.argval) is int
        and (op.opname in _BUMP_OPS or (op.opname == "BINARY_OP" and op.argrepr in _BUMP_SIGNS))
        and last.opname == store
        and last.argval == name
    )


_GLOBAL_USES = frozenset(
    {"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME", "STORE_NAME", "DELETE_NAME"}
)
_counters: dict[int, tuple[weakref.ref, frozenset[str]]] = {}


def _global_uses(code: types.CodeType) -> dict[str, list[tuple[list, int]]]:
    """Every use of a global name in `code` and its nested code: `(instructions, index)` each."""
    uses: dict[str, list[tuple[list, int]]] = {}
    pending = [code]
    while pending:
        c = pending.pop()
        pending.extend(_nested(c))
        instructions = list(dis.get_instructions(c))
        for k, ins in enumerate(instructions):
            if ins.opname in _GLOBAL_USES and isinstance(ins.argval, str):
                uses.setdefault(ins.argval, []).append((instructions, k))
    return uses


def _compute_global_counters(code: types.CodeType) -> frozenset[str]:
    uses = _global_uses(code)
    counters = set()
    for name, found in uses.items():
        loads = [(ins, k) for ins, k in found if ins[k].opname == "LOAD_GLOBAL"]
        bumps = [
            (ins, k) for ins, k in loads if _is_bump(ins, k, name, "LOAD_GLOBAL", "STORE_GLOBAL")
        ]
        # Every use of the name is one half of a bump: loaded only to be bumped and stored back.
        if loads and len(bumps) == len(loads) and len(found) == 2 * len(bumps):
            counters.add(name)
    return frozenset(counters)


def global_counters(code: types.CodeType) -> frozenset[str]:
    """The globals that `code` (nested code included) uses only as `global n; n += k` (`k` an
    int constant), at least once: a count of its runs. What the code computes never depends on
    such a global, so its key leaves the value out (and does not watch it): two functions that
    share the docs' `n_traces` counter do not invalidate each other's programs on every trace.
    A function that reads the global any other way (`return x * n`, `print(n)`), or a helper
    in the trace that does, keys it by value as any global."""
    return _memo(_counters, code, _compute_global_counters)


#
# Logs: globals that code only appends to.
#

_appended: dict[int, tuple[weakref.ref, frozenset[str]]] = {}
_METHOD_FLAG = sys.version_info >= (3, 12)


def _method_load(ins: Any, attr: str) -> bool:
    # The compiler loads an attribute as a method (`LOAD_METHOD`; from Python 3.12 `LOAD_ATTR`
    # with its low bit set) only for the call syntax `obj.attr(...)`: the bound method is never
    # made, stored or passed on, only called.
    # (Before 3.12 `LOAD_ATTR`'s argument is the name's index alone: its low bit means nothing.)
    if ins.argval != attr:
        return False
    if ins.opname == "LOAD_METHOD":
        return True
    return _METHOD_FLAG and ins.opname == "LOAD_ATTR" and bool(ins.arg & 1)


def _compute_appended_only(code: types.CodeType) -> frozenset[str]:
    uses = _global_uses(code)
    logs = set()
    for name, found in uses.items():
        if all(
            ins[k].opname == "LOAD_GLOBAL"
            and k + 1 < len(ins)
            and _method_load(ins[k + 1], "append")
            for ins, k in found
        ):
            logs.add(name)
    return frozenset(logs)


def appended_only(code: types.CodeType) -> frozenset[str]:
    """The globals that `code` (nested code included) uses only as `name.append(...)`, called
    at once (never stored, rebound or read any other way): a log of its traces. Where such a
    global is an exact `list`, `list.append` reads nothing of its contents and returns `None`,
    so what the code computes never depends on them (`_functions.py` leaves them out of its
    key). A function that reads the list any other way (`len(log)`, `log[-1]`, `print(log)`),
    or a helper in the trace that does, keys it by contents as any global."""
    return _memo(_appended, code, _compute_appended_only)
