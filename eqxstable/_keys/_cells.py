"""Closure cells: whether a cell can still be rebound once it holds a value (`sealed_cells`),
whether it only counts its function's runs (`counter_cells`), and whether no one but its
function holds it (`lone_cell`).

The first two are properties of code objects, which never change, so they are computed once per
code object. The analysis only ever answers "maybe" when it cannot prove something, and every
"maybe" costs a recompile, never a wrong answer.
"""

import dis
import sys
import types
import weakref
from typing import Any

from ._code import _is_bump, _nested
from ._enclosing import _enclosing


_WRITES = frozenset({"STORE_DEREF", "DELETE_DEREF"})
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)

#
# Closure cells: can this cell still be rebound?
#

_sealed: dict[int, tuple[weakref.ref, Any]] = {}


def _loops(instructions: list) -> list[tuple[int, int]]:
    return [
        (ins.argval, ins.offset)
        for ins in instructions
        if ins.opcode in _JUMPS and isinstance(ins.argval, int) and ins.argval < ins.offset
    ]


def _writers(owner: types.CodeType, name: str) -> list[types.CodeType] | None:
    """The code nested in `owner` that writes its cell variable `name` (`nonlocal`), or `None`
    when `owner` itself may rebind it once a closure over it holds a value: deleted, or assigned
    other than by one instruction outside any loop or only before every closure over it is made
    (a parameter normalised first, `lr = float(lr)`), with no loop around either."""
    instructions = list(dis.get_instructions(owner))
    stores = [i.offset for i in instructions if i.opname in _WRITES and i.argval == name]
    if any(i.opname == "DELETE_DEREF" and i.argval == name for i in instructions):
        return None
    loops = _loops(instructions)

    def in_loop(at: int) -> bool:
        return any(start <= at <= end for start, end in loops)

    if stores:
        closures = [
            i.offset for i in instructions if i.opname == "LOAD_CLOSURE" and i.argval == name
        ]
        once = len(stores) == 1 and not in_loop(stores[0])
        before = (
            bool(closures)
            and max(stores) < min(closures)
            and not any(map(in_loop, stores + closures))
        )
        if not (once or before):
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


def _compute_cells(f: types.FunctionType, library: bool) -> tuple[tuple, tuple]:
    code = f.__code__
    chain = _enclosing(f)
    sealed: list[bool | None] = []
    counters: list[bool] = []
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
        counters[-1] = (
            writers is not None
            and len(writers) == 1
            and writers[0] is code
            and _only_bumps(code, name)
        )
    return tuple(sealed), tuple(counters)


def _cells(f: types.FunctionType, library: bool) -> tuple[tuple, tuple]:
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
    """For each closure cell of `f`, whether it only counts `f`'s own runs: the enclosing function
    assigns it once (as for a sealed cell), nothing but `f`'s own code writes it, and `f` uses it
    only as `n += k` (`k` an int constant). What `f` computes never depends on such a cell, so it
    is keyed by its identity alone: a `nonlocal` trace counter, bumped again when JAX traces `f`
    after the call returned (a `custom_vjp` backward rule, traced when the gradient is taken), is
    not a change.
    """
    return _cells(f, library)[1]


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
