"""Bytecode analysis for `K-const-subscript`: the names that a function's code (and the code
nested in it) uses **only** as `name[k]`, `k` an `int` constant in the bytecode (`TABLE[3].b`),
with those `k`: a global (`subscripts`) or a closure variable (`cell_subscripts`).

Conservative by construction: such a name appears nowhere else in the code tree, not as any
other instruction's argument (another load, a store, a `del`, an attribute of anything, a local),
not among the constants (`getattr(m, "TABLE")`, a keyword's name) and, for a global, not among
the local, cell or free variable names, for a closure variable not among the local or cell
variable names of any code in the tree (a nested function's own variable of the same name) and
passed on only to nested code of the same tree (`LOAD_CLOSURE`), whose uses are checked alike.
The value on the stack under the constant is then the variable's own, fallen through to from its
own load (nothing else loads it), so `name[k]` is all that this code reads of it. Every "maybe"
leaves the name out: the whole value is keyed, a missed equivalence at most.
"""

import dis
import types
import weakref
from typing import Any


# The instructions that load an `int` constant, and the one that subscripts what is below it.
_INT_LOADS = frozenset({"LOAD_CONST", "LOAD_SMALL_INT"})
_SUBSCRIPT = "BINARY_SUBSCR"


def _const_subscript(instructions: list, at: int, load: str) -> int | None:
    """`k` where `instructions[at:at + 3]` is `load name; LOAD_CONST k; BINARY_SUBSCR`
    (`name[k]`, on Python 3.14 `BINARY_OP []`), `k` exactly an `int`; else `None`."""
    if at + 2 >= len(instructions) or instructions[at].opname != load:
        return None
    const, op = instructions[at + 1], instructions[at + 2]
    if const.opname not in _INT_LOADS or type(const.argval) is not int:
        return None
    if op.opname == _SUBSCRIPT or (op.opname == "BINARY_OP" and op.argrepr == "[]"):
        return const.argval
    return None


def _strings(consts: Any) -> set[str]:
    # Every string among a code object's constants, in tuples and frozensets too (`KW_NAMES`).
    out: set[str] = set()
    pending = list(consts)
    while pending:
        c = pending.pop()
        if type(c) is str:
            out.add(c)
        elif type(c) in (tuple, frozenset):
            pending.extend(c)
    return out


def _scan(
    code: types.CodeType, names: tuple[str, ...], load: str, passed: str | None
) -> dict[str, tuple[int, ...]]:
    found: dict[str, set[int] | None] = {name: set() for name in names}
    pending = [code]
    while pending and any(v is not None for v in found.values()):
        c = pending.pop()
        pending.extend(x for x in c.co_consts if isinstance(x, types.CodeType))
        elsewhere = _strings(c.co_consts).union(c.co_varnames, c.co_cellvars)
        if passed is None:
            elsewhere.update(c.co_freevars)
        for name in elsewhere.intersection(found):
            found[name] = None
        instructions = list(dis.get_instructions(c))
        for i, ins in enumerate(instructions):
            if type(ins.argval) is not str or ins.argval not in found:
                continue
            name = ins.argval
            seen = found[name]
            if seen is None:
                continue
            if ins.opname == passed:
                continue  # The cell handed to nested code of this tree, checked alike.
            k = _const_subscript(instructions, i, load)
            if k is None:
                found[name] = None
                continue
            seen.add(k)
    return {name: tuple(sorted(ks)) for name, ks in found.items() if ks}


def subscripts(code: types.CodeType, names: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """The globals among `names` (those `code` loads) used only as `name[k]` (`LOAD_GLOBAL`),
    with those `k` (`_globals.const_items`)."""
    return _scan(code, names, "LOAD_GLOBAL", None)


_cells: dict[int, tuple[weakref.ref, dict[str, tuple[int, ...]]]] = {}


def cell_subscripts(code: types.CodeType) -> dict[str, tuple[int, ...]]:
    """The free variables of `code` (its closure cells) used only as `name[k]` (`LOAD_DEREF`),
    with those `k`; computed once per code object."""
    hit = _cells.get(id(code))
    if hit is not None and hit[0]() is code:
        return hit[1]
    result = _scan(code, code.co_freevars, "LOAD_DEREF", "LOAD_CLOSURE")
    i = id(code)
    _cells[i] = (weakref.ref(code, lambda r, i=i: _cells.pop(i, None)), result)
    return result
