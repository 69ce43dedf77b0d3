"""What the `import` statements in a function's body bind, and what the function reads from them.

`def loss(x): import config; return x * config.LR` reads `config.LR` as surely as a function
whose module imported `config` at its top; only the bytecode differs. Each statement is matched
against the few shapes CPython compiles an import to (`import a`, `import a.b as c`, `from a
import b`); the local it binds is then followed as a global is (`_code.reads`): read only as
`local.attr`, those attributes; used any other way, the whole value. A shape not recognised
answers `None`, and the function is keyed by identity: a recompile, never a wrong answer.
"""

import dis
import types
import weakref
from typing import NamedTuple

from ._code import _ATTRS, _memo, _nested


class Binding(NamedTuple):
    """One name an `import` statement in a function's body binds to a local variable."""

    # The module as written (`a.b`, `""` for `from . import x`) and the number of leading dots.
    name: str
    level: int
    # `from name import ...`: the statement's module is `name` itself; a plain `import a.b` starts
    # from the top-level package `a`.
    from_: bool
    # The attributes taken in turn from that module (`import a.b.c as z`: `b`, `c`; `from a import
    # x`: `x`); empty for `import a.b`, which binds `a`.
    chain: tuple[str, ...]
    # The attributes the function reads from the local, or `None` where it uses it whole.
    attrs: tuple[str, ...] | None


_STORES = frozenset({"STORE_FAST", "STORE_DEREF"})
_LOCAL_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"})
# Python 3.13+ loads two locals in one instruction (`x * cfg.LR`); the second is on top.
_PAIR_LOADS = frozenset({"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"})
_NOT_READS = frozenset({"STORE_FAST", "DELETE_FAST"})
_CONSTS = frozenset({"LOAD_CONST", "LOAD_SMALL_INT"})
# Instructions whose argument is a name in `co_names` (`IMPORT_NAME 'cfg'`, `LOAD_ATTR 'cfg'`) or a
# constant: never a local variable.
_NOT_LOCALS = frozenset(dis.hasname) | frozenset(dis.hasconst)
_imports: dict[int, tuple[weakref.ref, tuple[Binding, ...] | None]] = {}


def _local_attrs(instructions: list, local: str) -> tuple[str, ...] | None:
    """The attributes `instructions` read from the fast local `local`, or `None` when any
    instruction names it other than as a store or as a load followed by an attribute."""
    seen: set[str] = set()
    for k, ins in enumerate(instructions):
        if ins.opcode in _NOT_LOCALS:
            continue
        arg = ins.argval
        if type(arg) is str:
            if arg != local or ins.opname in _NOT_READS:
                continue
            on_top = ins.opname in _LOCAL_LOADS
        elif type(arg) is tuple and local in arg:
            on_top = ins.opname in _PAIR_LOADS and arg[-1] == local and local not in arg[:-1]
        else:
            continue
        nxt = instructions[k + 1] if k + 1 < len(instructions) else None
        if not (on_top and nxt is not None and nxt.opname in _ATTRS and type(nxt.argval) is str):
            return None
        seen.add(nxt.argval)
    return tuple(sorted(seen))


def _swap(ins: dis.Instruction) -> bool:
    return ins.opname == "ROT_TWO" or (ins.opname == "SWAP" and ins.argval == 2)


def _statement(instructions: list, at: int) -> list[tuple[Binding, str, str]] | None:
    """The names the `IMPORT_NAME` at `at` binds, each with its store instruction and local, or
    `None` for a shape not recognised."""
    if at < 2:
        return None
    first, second, imported = instructions[at - 2 : at + 1]
    level, fromlist, name = first.argval, second.argval, imported.argval
    if first.opname not in _CONSTS or type(level) is not int or second.opname != "LOAD_CONST":
        return None
    if type(name) is not str:
        return None
    rest = instructions[at + 1 :]
    out = []
    if fromlist is None and level == 0:
        # `import a.b.c` binds `a`; `import a.b.c as z` takes `b`, then `c`, from it.
        chain: list[str] = []
        k = 0
        while k < len(rest) and rest[k].opname == "IMPORT_FROM":
            chain.append(rest[k].argval)
            k += 1
            if k + 1 < len(rest) and _swap(rest[k]) and rest[k + 1].opname == "POP_TOP":
                k += 2
            else:
                break
        if chain and chain != name.split(".")[1:]:
            return None
        if k >= len(rest) or rest[k].opname not in _STORES:
            return None
        if chain and (k + 1 >= len(rest) or rest[k + 1].opname != "POP_TOP"):
            return None
        out.append((Binding(name, 0, False, tuple(chain), None), rest[k].opname, rest[k].argval))
        return out
    if type(fromlist) is not tuple or not fromlist or any(type(n) is not str for n in fromlist):
        return None
    k = 0
    for wanted in fromlist:
        if k + 1 >= len(rest) or rest[k].opname != "IMPORT_FROM" or rest[k].argval != wanted:
            return None
        if rest[k + 1].opname not in _STORES:
            return None
        binding = Binding(name, level, True, (wanted,), None)
        out.append((binding, rest[k + 1].opname, rest[k + 1].argval))
        k += 2
    if k >= len(rest) or rest[k].opname != "POP_TOP":
        return None
    return out


def _compute_imports(code: types.CodeType) -> tuple[Binding, ...] | None:
    found: list[Binding] = []
    pending = [code]
    while pending:
        c = pending.pop()
        pending.extend(_nested(c))
        instructions = list(dis.get_instructions(c))
        for at, ins in enumerate(instructions):
            if ins.opname == "IMPORT_STAR":
                return None
            if ins.opname != "IMPORT_NAME":
                continue
            bound = _statement(instructions, at)
            if bound is None:
                return None
            for binding, store, local in bound:
                # A cell is read by nested code too: the whole value, as for any other use.
                attrs = _local_attrs(instructions, local) if store == "STORE_FAST" else None
                found.append(binding._replace(attrs=attrs))
    return tuple(dict.fromkeys(found))


def imports(code: types.CodeType) -> tuple[Binding, ...] | None:
    """What the `import` statements in `code` (nested code included) bind to its locals, and what
    it reads from each; `None` when a statement has a shape not recognised (its function is then
    keyed by identity)."""
    return _memo(_imports, code, _compute_imports)
