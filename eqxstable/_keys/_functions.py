"""Keys of Python functions (`K-function`, `K-cell`, `K-counter-cell`): by everything a trace can
read (code, closure cells, defaults, attributes, names, annotations, and the globals it loads and
the modules it imports, keyed by `_globals.py` and followed into the user's own helpers, classes
and modules)."""

import builtins
import types
from typing import Any

from ._cells import counter_cells, log_cells, lone_cell, sealed_cells
from ._code import appended_only, global_counters, reads, reads_namespaces
from ._context import compound, Ctx, key
from ._fallbacks import identity, too_deep
from ._globals import _global, _imported, const_items
from ._handles import handle
from ._imports import imports
from ._memo import recall
from ._modules import IMPORT_MADE
from ._origin import library_function, SINGLEDISPATCH_CODE
from ._pure import pure_library
from ._registries import dispatch_registry, singledispatch
from ._state import dict_state, extra_attrs, impure_library, owns_data, unreadable
from ._subscripts import cell_subscripts
from ._types import FunctionKey, Namespace
from ._watch import plain_fn_state


_EMPTY = ("empty-cell",)
_COUNTER = ("counter-cell",)
_LOG = ("appended-list",)
# Builtins through which a function can read any global by a name its bytecode does not show.
_DYNAMIC = (builtins.globals, builtins.vars, builtins.eval, builtins.exec, builtins.locals)


def _is_dynamic(v: Any) -> bool:
    return any(v is d for d in _DYNAMIC)


def _dynamic(f: types.FunctionType, r: Any, table: dict) -> bool:
    """Whether `f` can reach `eval`, `exec`, `globals`, `vars` or `locals` however it gets them:
    loaded by name, read from a module (`builtins.eval`, a chain `a.b.eval`), or held in a
    closure cell or a default. Any global may then be read by a name its bytecode does not show."""
    g = f.__globals__
    for n in r.names:
        v = g.get(n, table.get(n))
        if _is_dynamic(v):
            return True
        if isinstance(v, types.ModuleType):
            chains = [(a,) for a in r.attrs.get(n, ())] + list(r.deep.get(n, ()))
            for chain in chains:
                x: Any = v
                for a in chain:
                    d = getattr(x, "__dict__", None) if isinstance(x, types.ModuleType) else None
                    x = d.get(a) if type(d) is dict else None
                if _is_dynamic(x):
                    return True
    held = [*(f.__defaults__ or ()), *(f.__kwdefaults__ or {}).values()]
    for cell in f.__closure__ or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:
            pass
    return any(_is_dynamic(v) for v in held)


def fn_state(f: types.FunctionType) -> tuple:
    """Everything about a function that can be rebound in place after it was keyed."""
    state: list[Any] = [f.__code__, f.__defaults__, f.__kwdefaults__]
    if f.__kwdefaults__:
        state.extend(dict_state(f.__kwdefaults__))
    if f.__closure__:
        for cell in f.__closure__:
            try:
                state.append(cell.cell_contents)
            except ValueError:
                state.append(_EMPTY)
    d = f.__dict__
    if d:
        state.extend(dict_state(d))
    state.extend(_names(f))
    annotations = f.__annotations__
    state.append(annotations)
    if annotations:
        state.extend(dict_state(annotations))
    return tuple(state)


def _names(f: types.FunctionType) -> tuple:
    # What code can read of a function besides its code, cells, defaults and `__dict__` (a
    # dispatcher keyed by `__name__`, `inspect.signature` reading annotations), all assignable.
    return (f.__name__, f.__qualname__, f.__module__, f.__doc__, *_type_params(f))


def _type_params(f: types.FunctionType) -> tuple:
    # Python 3.12+: `def f[T](x)`; assignable like the names.
    params = getattr(f, "__type_params__", None)
    return () if params is None else (params,)


def _annotations(f: types.FunctionType, ctx: Ctx) -> tuple:
    """`f.__annotations__`, the function's own dict, by contents (watched with `fn_state`). An
    annotation compared by its own `==` (`int | None`, `list[int]`) is keyed as that very object
    too: two functions holding the same one may be substituted, as for any object they both
    read, and a rebuilt one holding an equal new one is a new key (a retrace)."""
    parts = []
    for name, value in f.__annotations__.items():
        own_eq = ctx.own_eq
        ctx.own_eq = False
        part = key(value, ctx, False)
        if ctx.own_eq:
            part = (Namespace(value), part)
        ctx.own_eq = own_eq
        parts.append((name, part))
    return tuple(parts)


def _cells(f: types.FunctionType, ctx: Ctx, library: bool) -> tuple:
    # `K-cell`, `K-counter-cell`.
    if not f.__closure__:
        return ()
    # Before any reference to the closure is held here: `lone_cell` counts them.
    sealed = [s or lone_cell(f, i) for i, s in enumerate(sealed_cells(f, library))]
    empty = _empty_for_good(f)
    counters = counter_cells(f, library) if not all(sealed) else None
    logs = log_cells(f, library)
    subscripted = {} if library else cell_subscripts(f.__code__)
    if (any(logs) or subscripted) and (
        type(f.__builtins__) is not dict or _dynamic(f, reads(f.__code__), f.__builtins__)
    ):
        # `locals()`, `eval(...)`: the list may be read by a name the bytecode does not show.
        logs = (False,) * len(logs)
        subscripted = {}
    names = f.__code__.co_freevars
    out = []
    for i, (cell, is_sealed) in enumerate(zip(f.__closure__, sealed)):
        try:
            contents = cell.cell_contents
        except ValueError:
            # `K-cell`: an empty cell that can never be filled holds no state.
            out.append(_EMPTY if empty[i] else (_EMPTY, identity(cell, ctx)))
            continue
        if counters and counters[i] and (type(contents) is int or type(contents) is float):
            # A count of `f`'s own runs (`nonlocal n; n += 1`): never what `f` computes.
            out.append((_COUNTER, identity(cell, ctx)))
            continue
        if type(contents) is tuple and names[i] in subscripted:
            # `K-const-subscript`: a tuple this code reads only as `table[k]`, `k` constants
            # (`_subscripts.cell_subscripts`): those items (the cell's contents are watched,
            # `fn_state`).
            part = const_items(contents, subscripted[names[i]], ctx)
        elif logs[i] and type(contents) is list:
            # `K-trace-log`: a list `f` only appends to (`log.append("f")`), its contents no
            # part of what `f` computes; the very list, as `list.append` writes into it (the cell
            # holding it is watched, `fn_state`).
            part = (_LOG, identity(contents, ctx))
        else:
            # (A concrete path here is a key equal to nothing, as anywhere it is reached: `K-path`.)
            part = key(contents, ctx, False)
        if not is_sealed:
            # A loop variable, or one a `nonlocal` setter may rebind: never shared with a
            # closure over another cell, whatever the two hold now.
            part = (identity(cell, ctx), part)
        out.append(part)
    return tuple(out)


def _empty_for_good(f: types.FunctionType) -> list[bool]:
    """For each closure cell of `f`, whether it is empty and can never be filled: no frame and no
    other function holds it, and `f`'s own code never writes it (`lone_cell`, which counts the
    references, so this runs before any reference to the closure is held). Such a cell holds no
    state (a variable of a branch the factory did not take: optax's `clip_fn`), so closures
    rebuilt alike are equivalent. Every other empty cell may be filled later and is keyed by its
    identity; filling a cell through `cell_contents` is seen by the watch (`fn_state`)."""
    closure = f.__closure__
    assert closure is not None
    n = len(closure)
    del closure
    return [_is_empty(f, i) and lone_cell(f, i) for i in range(n)]


def _is_empty(f: types.FunctionType, index: int) -> bool:
    closure = f.__closure__
    assert closure is not None
    try:
        closure[index].cell_contents
    except ValueError:
        return True
    return False


def _trace_log(namespace: dict, name: str, ctx: Ctx) -> Any:
    # A global `list` the function only appends to (`TRACE_LOG.append("f")`, `_code.appended_only`):
    # `list.append` reads none of its contents, so they are no part of the key and are not
    # watched (two functions logging their traces into one list do not invalidate each other on
    # every trace). The binding is watched: rebound to anything but a list, it is keyed as read.
    ctx.names.append((namespace, name, namespace[name]))
    return _LOG


@compound
def function(f: types.FunctionType, ctx: Ctx, content_ok: bool) -> Any:
    library = library_function(f)
    if library and f.__code__ is SINGLEDISPATCH_CODE and dispatch_registry(f) is not None:
        return singledispatch(f, ctx, content_ok)  # K-dispatch: its registry is data
    if library and ctx.depth > 1 and not pure_library(f):
        # Reached by a reader (a partial of `os.getenv`, `from os import getenv`); before the
        # memo, which holds its key as a function keyed on its own.
        return impure_library(f, ctx)
    if not library and reads_namespaces(f.__code__):
        # `f.__globals__["c"]`, `sys._getframe().f_globals["c"]`: what it reads there no key can
        # enumerate. Its reader is never shared (before the memo, as above); on its own it is
        # itself, as under `equinox.filter_jit`.
        return identity(f, ctx) if ctx.depth == 1 else unreadable(f, ctx)
    memo = recall(f)
    if memo is not None and memo.spliced:
        watch = memo.watch.strong()
        if watch is not None:
            ctx.extend(watch)
            ctx.identity |= memo.key.identity
            ctx.own_eq |= not memo.key.substitutable
            return memo.key.parts
    code = f.__code__
    try:
        f.__annotations__
    except Exception:
        # Evaluated lazily on Python 3.14, which may raise: nothing to key or watch by value.
        return identity(f, ctx)
    if not library:
        # Most functions have no closure, keyword defaults or attributes: a cheaper check.
        plain = (
            f.__kwdefaults__ is None
            and not f.__closure__
            and not f.__dict__
            and not f.__annotations__
            and not _type_params(f)
        )
        state_fn = plain_fn_state if plain else fn_state
        ctx.states.append((f, state_fn, state_fn(f)))
    cells = _cells(f, ctx, library)
    kwdefaults = f.__kwdefaults__
    if kwdefaults or owns_data(f):
        # The function owns a dict that can change in place (`f.__kwdefaults__["k"] = 9.0`,
        # `f.scale = 9.0` read back as `act.scale`): an equal function elsewhere reads another
        # dict, so `intern` must never hand out one for the other (`ctx.own_eq`: "not
        # substitutable"). Keyed by contents still, and watched, for the jit caches.
        ctx.own_eq = True
    globals_read: tuple = ()
    if not library:
        r = reads(code)
        names = r.names
        table = f.__builtins__
        if (names or imports(code)) and (
            type(f.__globals__) is not dict or type(table) is not dict
        ):
            # Python reads globals and builtins that are not exactly a `dict` through their own
            # `__getitem__` (a subclass's `__missing__` may serve any name, from anywhere): what
            # it returns no key can see, so the function is a key equal to nothing.
            return too_deep(f, ctx)
        counters = global_counters(code)
        dynamic = _dynamic(f, r, table)
        if dynamic:
            # `globals()["c"]`, `eval(...)`: any global may be read, so all of them are keyed
            # (the import system's own objects aside, as for a module read whole).
            names = (*names, *(n for n in f.__globals__ if n not in IMPORT_MADE))
            names = tuple(dict.fromkeys(names))
            counters = frozenset()
            # Nor is any global read only as its bytecode shows (`K-const-subscript`).
            r = r._replace(subscripts={})
        logs = frozenset() if dynamic else appended_only(code)
        globals_read = tuple(
            (name, _COUNTER)
            if name in counters and type(f.__globals__.get(name)) in (int, float)
            else (name, _trace_log(f.__globals__, name, ctx))
            if name in logs and type(f.__globals__.get(name)) is list
            else (name, _global(f.__globals__, name, r, ctx, table))
            for name in names
        )
        bindings = imports(code)
        imported = () if bindings == () else _imported(f, bindings, dynamic, ctx)
        if imported is None:
            return identity(f, ctx)
        globals_read += imported
    parts = FunctionKey(
        "fn",
        code,
        # Through a weak handle: generated code's namespace holds the function itself.
        Namespace.through(handle(f), f.__globals__),
        key(f.__defaults__, ctx, False),
        tuple((k, key(v, ctx, False)) for k, v in kwdefaults.items()) if kwdefaults else (),
        cells,
        extra_attrs(f, ctx),
        globals_read,
        (
            f.__name__,
            f.__qualname__,
            key(f.__module__, ctx, False),
            key(f.__doc__, ctx, False),
            key(_type_params(f), ctx, False),
            Namespace(f.__builtins__),
        ),
        # A library function's annotations are part of its code, constant like it.
        () if library else _annotations(f, ctx),
    )
    back = ctx.stack.back
    if back is not None and not library and id(f) in back:
        # Its state reaches the function itself (a closure cell, a default or a global holding
        # it: `getattr(act, "temperature", 1.0)` inside `act`): it may use its own object as
        # state, which its owner may change later (`m2.act.temperature = 5.0`). An equal function
        # elsewhere is another object, so `intern` never hands out one for the other
        # (`ctx.own_eq`); keyed by value still, and watched, for the jit caches.
        ctx.own_eq = True
    return parts
