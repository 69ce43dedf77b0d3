"""Closure cells: whether a cell can still be rebound once it holds a value (`sealed_cells`),
whether it only counts its function's runs (`counter_cells`), whether its function only appends
to it (`log_cells`), and whether no one but its function holds it (`lone_cell`).

The first two are properties of code objects, which never change, so they are computed once per
code object. The analysis only ever answers "maybe" when it cannot prove something, and every
"maybe" costs a recompile, never a wrong answer.
"""

import dis
import sys
import types
import weakref
from typing import Any

from ._code import _is_bump, _method_load, _nested
from ._enclosing import _enclosing


_WRITES = frozenset({"STORE_DEREF", "DELETE_DEREF"})
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)

#
# Closure cells: can this cell still be rebound?
#

_sealed: dict[int, tuple[weakref.ref, Any]] = {}

# Instructions through which the enclosing code reads its cell variable: no change to it.
_READS = frozenset({"LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"})
# Instructions that bind the cell variable to a value (the only stores its own code can make).
_STORES = frozenset({"STORE_DEREF"})
# Instructions that hand the cell itself to a closure being made (`LOAD_FAST` from Python 3.13,
# where `LOAD_CLOSURE` is a pseudo-instruction).
_CAPTURES = frozenset({"LOAD_CLOSURE", "LOAD_FAST"})
# Instructions that make the frame's cells before its first `RESUME` (not a binding).
_PROLOGUE = frozenset({"MAKE_CELL", "COPY_FREE_VARS"})


def _edges(code: types.CodeType, instructions: list) -> list[tuple[int, int, int]]:
    """Every control-flow edge of `code` other than falling through to the next instruction, as
    `(lo, hi, target)`: an instruction at an offset in `[lo, hi]` may continue at `target`. Jumps
    (`dis.hasjrel`, `dis.hasjabs`: loops, `while True`, `break`, `continue`, conditionals,
    `for`, `await`'s `SEND` loop) and, from Python 3.11, the exception table's handlers (`try`,
    `with`, `finally`, a generator's `yield` closed or thrown into). A `yield` resumes at the
    next instruction, as a call returns."""
    edges = [
        (ins.offset, ins.offset, ins.argval)
        for ins in instructions
        if ins.opcode in _JUMPS and isinstance(ins.argval, int)
    ]
    table = getattr(dis.Bytecode(code), "exception_entries", ())
    edges.extend((e.start, e.end - 1, e.target) for e in table)
    return edges


def _crossed(edges: list[tuple[int, int, int]], boundary: int) -> bool:
    """Whether some edge goes back across `boundary`: from at or past it to before it."""
    return any(hi >= boundary > target for _, hi, target in edges)


def _never_rebound(owner: types.CodeType, name: str) -> bool:
    """Whether `owner`'s own code can never bind its cell variable `name` again once the cell
    holds a value and a closure over it exists. Either of:

    - every store lies before the first capture, and some boundary between the last store and
      the first capture is crossed by no edge going back (a parameter, bound on entry, with no
      store, or normalised first: `lr = float(lr)`);
    - a local (never a parameter, which holds a value from entry) with one store that no edge
      going back can reach again: the cell is empty until it runs, and never bound after (a
      recursive helper, `def fact(n): ... fact(n - 1)`, captured before its own binding).

    Sound by construction: execution moves to a lower offset only through an edge of `_edges`
    (falling through goes forward, a `yield` resumes where it stopped), so a run that reaches a
    capture (at or past a boundary) and then a store (before it) takes an edge from at or past
    the boundary to before it; and a store runs twice in one frame only through an edge from
    past it to it or before it. Any use of the name this does not know (a `del`, a store that is
    not `STORE_DEREF`, a capture that is also a store, an instruction naming several variables)
    makes it "no"."""
    instructions = list(dis.get_instructions(owner))
    resumed = False
    stores: list[int] = []
    captures: list[int] = []
    for ins in instructions:
        if ins.opname == "RESUME":
            resumed = True
        named = ins.argval == name or (isinstance(ins.argval, tuple) and name in ins.argval)
        if not named or not (ins.opcode in dis.hasfree or ins.opcode in dis.haslocal):
            continue
        if ins.opname in _READS or (ins.opname in _PROLOGUE and not resumed):
            continue
        if ins.opname in _STORES:
            stores.append(ins.offset)
        elif ins.opname in _CAPTURES and ins.argval == name:
            captures.append(ins.offset)
        else:
            return False
    if not captures:
        return False
    edges = _edges(owner, instructions)
    last, first = max(stores, default=-1), min(captures)
    if last < first:
        boundaries = [i.offset for i in instructions if last < i.offset <= first]
        if any(not _crossed(edges, b) for b in boundaries):
            return True
    if len(stores) != 1 or name in owner.co_varnames:
        return False
    (store,) = stores
    # An edge from past the store to it or before it (from at or past `store + 1`).
    return not _crossed(edges, store + 1)


def _writers(owner: types.CodeType, name: str) -> list[types.CodeType] | None:
    """The code nested in `owner` that writes its cell variable `name` (`nonlocal`), or `None`
    when `owner` itself may rebind it once a closure over it holds a value
    (`_never_rebound`: a parameter rebound after the closure is made, `s = later` or
    `s *= k`, a store in a loop around the closure, a generator rebinding it after a `yield`,
    a `del`). A parameter normalised first, `lr = float(lr)`, is bound before."""
    if not _never_rebound(owner, name):
        return None
    writers = []
    pending = [c for c in _nested(owner) if name in c.co_freevars]
    while pending:
        c = pending.pop()
        if any(i.opname in _WRITES and i.argval == name for i in dis.get_instructions(c)):
            writers.append(c)
        pending.extend(x for x in _nested(c) if name in x.co_freevars)
    return writers


def _only_bumps(code: types.CodeType, name: str) -> bool:
    """Whether `code` uses its free variable `name` only as `name += k` with an int constant `k`
    (a count of its own runs), at least once, and no code nested in it uses it at all."""
    if any(name in c.co_freevars for c in _nested(code)):
        return False
    instructions = list(dis.get_instructions(code))
    uses = [
        k
        for k, i in enumerate(instructions)
        if i.argval == name and ("DEREF" in i.opname or i.opname == "LOAD_CLOSURE")
    ]
    loads = [k for k in uses if instructions[k].opname == "LOAD_DEREF"]
    if not loads or not all(_is_bump(instructions, k, name) for k in loads):
        return False
    return sorted(uses) == sorted([*loads, *(k + 3 for k in loads)])


# The instructions through which code uses a closure variable other than by reading or writing
# it: passing the cell on to a function it makes (`LOAD_CLOSURE`, whose code is checked too).
_PASS_CELL = frozenset({"LOAD_CLOSURE"})
# Instructions whose argument names something other than a local or closure variable: an
# attribute (`x.log`) or a global of the same name.
_OTHER_NAMES = frozenset(
    {
        "LOAD_ATTR",
        "LOAD_METHOD",
        "STORE_ATTR",
        "DELETE_ATTR",
        "LOAD_SUPER_ATTR",
        "LOAD_GLOBAL",
        "STORE_GLOBAL",
        "DELETE_GLOBAL",
        "IMPORT_NAME",
        "IMPORT_FROM",
        "LOAD_CONST",
    }
)


def _only_appends(code: types.CodeType, name: str) -> bool:
    """Whether `code` uses its free variable `name` only as `name.append(...)` called at once
    (`_code._method_load`: the bound method is never made, stored or passed on), at least once,
    and passes the cell on only to code nested in it that does the same. Any other use (read,
    written, deleted, read by a class body, an instruction this does not know) is a "no"."""
    appends = False
    pending = [code]
    while pending:
        c = pending.pop()
        pending.extend(x for x in _nested(c) if name in x.co_freevars)
        instructions = list(dis.get_instructions(c))
        for k, ins in enumerate(instructions):
            if ins.opname in _OTHER_NAMES:
                continue
            named = ins.argval == name or (isinstance(ins.argval, tuple) and name in ins.argval)
            if not named:
                continue
            if ins.opname in _PASS_CELL:
                continue
            if (
                ins.opname == "LOAD_DEREF"
                and k + 1 < len(instructions)
                and _method_load(instructions[k + 1], "append")
            ):
                appends = True
                continue
            return False
    return appends


def _compute_cells(f: types.FunctionType, library: bool) -> tuple[tuple, tuple, tuple]:
    code = f.__code__
    chain = _enclosing(f)
    sealed: list[bool | None] = []
    counters: list[bool] = []
    logs = tuple(not library and _only_appends(code, name) for name in code.co_freevars)
    for name in code.co_freevars:
        counters.append(False)
        if name == "__class__":
            # Set once by `type.__new__` for methods that use `super()`.
            sealed.append(True)
            continue
        if library:
            # Installed packages are constants: their closures are not rebound once made.
            sealed.append(True)
            continue
        owner = None
        for c in reversed(chain or ()):
            if name in c.co_cellvars:
                owner = c
                break
        if owner is None:
            # Not found (a redefined or unusual enclosing function, a lambda in a lambda): the
            # function's own cell may still be proven alone (`lone_cell`), else it may be rebound.
            sealed.append(None)
            continue
        writers = _writers(owner, name)
        sealed.append(writers == [])
        # Other functions may bump the same cell (two jitted closures sharing one `nonlocal`
        # trace counter): what `f` computes still never depends on it, as `f` only bumps it;
        # one that reads it keys it by contents in its own key. Every writer only bumps it
        # (a reset from outside, `n = 0`, stays a change, as before).
        counters[-1] = (
            writers is not None
            and any(w is code for w in writers)
            and all(_only_bumps(w, name) for w in writers)
        )
    return tuple(sealed), tuple(counters), logs


def _cells(f: types.FunctionType, library: bool) -> tuple[tuple, tuple, tuple]:
    code = f.__code__
    hit = _sealed.get(id(code))
    if hit is not None and hit[0]() is code:
        return hit[1]
    result = _compute_cells(f, library)
    if _enclosing(f) is not None or library:
        # Only a found enclosing code (or the library rule) makes the answer a property of the
        # code object; otherwise the outer function may be defined later, so ask again.
        i = id(code)
        _sealed[i] = (weakref.ref(code, lambda r, i=i: _sealed.pop(i, None)), result)
    return result


def sealed_cells(f: types.FunctionType, library: bool) -> tuple[bool | None, ...]:
    """For each closure cell of `f`, whether it can no longer be rebound once it holds a value:
    `True`, `False`, or `None` where the enclosing code was not found (then `lone_cell` decides).

    A sealed cell is keyed by its contents alone, so closures rebuilt by the same factory are
    equivalent. Any other cell is keyed by its identity too: two closures over different loop
    variables (or over variables that a `nonlocal` setter may rebind) are never equivalent,
    whatever they hold now. An empty cell is never sealed.
    """
    return _cells(f, library)[0]


def counter_cells(f: types.FunctionType, library: bool) -> tuple[bool, ...]:
    """For each closure cell of `f`, whether it only counts runs: the enclosing function assigns
    it once (as for a sealed cell), `f`'s own code writes it, and `f` uses it only as `n += k`
    (`k` an int constant); other functions may bump it too (two jitted closures sharing one
    `nonlocal` trace counter). What `f` computes never depends on such a cell, so it is keyed by
    its identity alone: a `nonlocal` trace counter, bumped again when JAX traces `f` (or a
    sibling) after the call returned (a `custom_vjp` backward rule, traced when the gradient is
    taken), is not a change. A function that reads the cell keys it by contents in its own key.
    """
    return _cells(f, library)[1]


def log_cells(f: types.FunctionType, library: bool) -> tuple[bool, ...]:
    """For each closure cell of `f`, whether `f` (and the code nested in it that shares the cell)
    uses it only as `log.append(...)` called at once: a trace log in a closure cell, shared by
    several jitted closures. Where the cell holds an exact `list`, `list.append` reads none of
    its contents and returns `None`, so what `f` computes never depends on them (`K-trace-log`);
    a function reading the list any other way keys it by contents in its own key."""
    return _cells(f, library)[2]


#
# A cell no one else holds: the enclosing frame has returned, and no other function shares it.
#


def _references(f: types.FunctionType, index: int) -> tuple[int, int]:
    closure = f.__closure__
    assert closure is not None
    cell = closure[index]
    return sys.getrefcount(closure), sys.getrefcount(cell)


def _alone_now() -> types.FunctionType:
    x = 1.0
    return lambda: x


# The counts for a closure whose cell only its function holds, measured on this interpreter.
_ALONE = _references(_alone_now(), 0)


def _writes_own(code: types.CodeType, name: str) -> bool:
    pending = [code]
    while pending:
        c = pending.pop()
        if any(i.opname in _WRITES and i.argval == name for i in dis.get_instructions(c)):
            return True
        pending.extend(x for x in _nested(c) if name in x.co_freevars)
    return False


def lone_cell(f: types.FunctionType, index: int) -> bool:
    """Whether closure cell `index` of `f` can never be rebound: `f`'s closure tuple and the cell
    are referenced by nothing else (no running or suspended frame, no other function sharing the
    cell, as a `nonlocal` setter would), and `f`'s own code never writes it. Only assigning
    `cell_contents` through `f.__closure__` could then change it, which verify mode catches."""
    if f.__closure__ is None or _references(f, index) > _ALONE:
        return False
    return not _writes_own(f.__code__, f.__code__.co_freevars[index])
