"""What a function's bytecode can read, and whether its closure cells can still be rebound.

Both are properties of code objects, which never change, so they are computed once per code
object. The analysis only ever answers "maybe" when it cannot prove something, and every "maybe"
costs a recompile, never a wrong answer.
"""

import dis
import sys
import types
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple


_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_ATTRS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_WRITES = frozenset({"STORE_DEREF", "DELETE_DEREF"})
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


class Reads(NamedTuple):
    """The globals a code object (and the code nested in it) loads."""

    names: tuple[str, ...]
    # For each global read only as `name.attr` (a module's or class's attribute): those attributes.
    # A global used any other way (called, passed on) is absent here and read whole.
    attrs: dict[str, tuple[str, ...]]
    # For such a global, the chains of two or more attributes read from it (`jax.nn.myact` is
    # `("nn", "myact")`): what is read from a submodule, which may hold the user's own objects.
    deep: dict[str, tuple[tuple[str, ...], ...]] = {}


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
# there, and from whose namespace, the bytecode does not show.
_NAMESPACE_ATTRS = frozenset({"__globals__", "f_globals", "f_locals", "f_builtins"})
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
    """Whether `code` (or code nested in it) names a function's `__globals__` or a frame's
    `f_globals`, `f_locals` or `f_builtins`: it may read any name of any namespace."""
    return _memo(_namespaces, code, _compute_namespaces)


#
# Closure cells: can this cell still be rebound?
#

_sealed: dict[int, tuple[weakref.ref, Any]] = {}


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


def _compute_global_counters(code: types.CodeType) -> frozenset[str]:
    uses: dict[str, list[tuple[list, int]]] = {}
    pending = [code]
    while pending:
        c = pending.pop()
        pending.extend(_nested(c))
        instructions = list(dis.get_instructions(c))
        for k, ins in enumerate(instructions):
            if ins.opname in _GLOBAL_USES and isinstance(ins.argval, str):
                uses.setdefault(ins.argval, []).append((instructions, k))
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
