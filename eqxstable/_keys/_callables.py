"""Keys of callables: a Python function by everything its trace can read (code, closure cells,
defaults, attributes, and the globals it loads, followed into the user's own helpers, classes and
modules), partials, bound methods, builtins, and `jax.jit` functions with all their options."""

import builtins
import functools as ft
import struct
import sys
import types
from collections.abc import Iterable, Mapping, Sequence, Set, Sized
from typing import Any

import jax
import numpy as np

from .._compat import jit_parts
from ._code import (
    counter_cells,
    global_counters,
    lone_cell,
    Reads,
    reads,
    reads_namespaces,
    sealed_cells,
)
from ._context import compound, Ctx, identity, key, recall, too_deep
from ._imports import Binding, imports
from ._library import container, opaque, shallow
from ._origin import (
    library_class,
    library_code_object,
    library_constant,
    library_function,
    library_module,
    pure_library,
)
from ._types import FunctionKey, Namespace
from ._values import (
    added_state,
    class_part,
    dict_state,
    dtype_key,
    extra_attrs,
    IMPORT_MADE,
    impure_library,
    module_class,
    mutable,
    own_eq,
    owns_data,
    served_by_class,
    slots_of,
    unreadable,
)
from ._watch import MISSING, plain_fn_state, size


PjitFunction = type(jax.jit(lambda: None))
_EMPTY = ("empty-cell",)
_COUNTER = ("counter-cell",)
# Builtins through which a function can read any global by a name its bytecode does not show.
_DYNAMIC = (builtins.globals, builtins.vars, builtins.eval, builtins.exec, builtins.locals)
# The import statement's own function, while no one has replaced it in a function's builtins.
_IMPORT = builtins.__import__


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
    out = []
    for i, (cell, is_sealed) in enumerate(zip(f.__closure__, sealed)):
        try:
            contents = cell.cell_contents
        except ValueError:
            # `K-cell`: an empty cell that can never be filled holds no state.
            out.append(_EMPTY if empty[i] else (_EMPTY, identity(cell, ctx)))
            continue
        if counters and counters[i] and type(contents) in (int, float):
            # A count of `f`'s own runs (`nonlocal n; n += 1`): never what `f` computes.
            out.append((_COUNTER, identity(cell, ctx)))
            continue
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


def _global(namespace: dict, name: str, r: Reads, ctx: Ctx, table: dict) -> Any:
    """The key of what a function reads through the global `name`, falling back on its builtins
    `table` as Python does."""
    attrs = r.attrs.get(name)
    value = namespace.get(name, MISSING)
    ctx.names.append((namespace, name, value))
    if value is MISSING:
        # A builtin: defining the global later is seen, and so is rebinding the builtin
        # (`builtins.SCALE = 3.0`), watched in the function's own builtins.
        found = table.get(name, MISSING)
        ctx.names.append((table, name, found))
        if found is not MISSING and not library_code_object(found):
            # Not code (`builtins.SCALE = 2.0`, a user's function): data the program bound,
            # keyed as a global is.
            return key(found, ctx, False)
        if found is not MISSING and not pure_library(found):
            return impure_library(found, ctx)  # `open`, `input`
        return ("builtin", name, Namespace(None if found is MISSING else found))
    if attrs is not None and isinstance(value, types.ModuleType):
        return _module_attrs(value, attrs, ctx, r.deep.get(name, ()))
    if attrs is not None and type(value) is np.ndarray and _ARRAY_META.issuperset(attrs):
        return array_meta(value, ctx)
    if isinstance(value, type) and library_class(value) and not pure_library(value):
        # A library class read by the function: its class methods may read library state
        # (`datetime.now()`). A class met as an object's type is keyed as a class.
        return impure_library(value, ctx)
    return key(value, ctx, False)


def _library_state(v: Any) -> bool:
    """Whether `v` is a library's object with attributes, neither a container nor a value nor a
    constant (a config object), which `_module_attrs` keys one level deep."""
    from . import _rules  # The dispatcher imports this module.

    t = type(v)
    return (
        _rules.resolve(t) is library_object
        and not isinstance(v, (Mapping, Sequence, Set, Sized, Iterable))
        and (getattr(v, "__dict__", None) is not None or bool(slots_of(t)))
        and not library_constant(v)
    )


# Values a library data object's attribute may be for the object to be keyed one level deep.
_PLAIN = frozenset({int, float, complex, str, bytes, bool, type(None)})
# What a library class may hold in its own dict without holding data: its code.
_CLASS_CODE = (
    property,
    staticmethod,
    classmethod,
    types.MemberDescriptorType,
    types.GetSetDescriptorType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
)


def _flat_library_data(v: Any) -> bool:
    """Whether everything a reader can reach through one attribute of `v` is a plain value or
    library code: its own attributes plain values, and its classes holding no data (a class
    attribute such as `logging.Logger.manager` is state that `v.manager` reads)."""
    names = [*(getattr(v, "__dict__", None) or {}), *slots_of(type(v))]
    for name in names:
        if type(getattr(v, name, None)) not in _PLAIN:
            return False
    for klass in type(v).__mro__[:-1]:
        for name, value in vars(klass).items():
            if name.startswith("__") and name.endswith("__"):
                continue  # The class's own machinery (`__doc__`, `__slots__`, `__dict__`).
            if not (
                type(value) in _PLAIN
                or isinstance(value, _CLASS_CODE)
                or library_code_object(value)
            ):
                return False
    return True


def _library_data(v: Any, ctx: Ctx) -> Any:
    """`K-module-attrs`: a library's data object read from its module (`logging.root`,
    `jax.config`). The reader's bytecode shows only that it is read, not how deep: an object whose
    attributes are all plain values (and whose classes hold none) is keyed one level deep
    (`shallow`); one holding another object (`logging.root.manager.disable`, a list of handlers)
    would be keyed by that object's identity while what it holds changes unseen, so its reader
    gets a key equal to nothing. JAX's configuration is keyed one level deep as before: the
    values a trace reads from it are JAX's trace context and `_jit/_config.untraced`."""
    if v is jax.config or _flat_library_data(v):
        return shallow(v, ctx)
    return too_deep(v, ctx)


# What an array says of itself without its items: a function reading only these of a global
# array (`DATA.shape[0]`) is keyed by them, never by a copy of the array's bytes.
_ARRAY_META = frozenset({"shape", "dtype", "ndim", "size", "itemsize", "nbytes"})


def array_meta(a: np.ndarray, ctx: Ctx) -> Any:
    """`K-array-reached` for a global array the function reads only `.shape`, `.dtype` and the
    like of: its shape and dtype (both assignable in place, watched), not its bytes; a 200 MB
    dataset read for its length is neither copied into the key nor compared on each call."""
    ctx.states.append((a, _meta_state, _meta_state(a)))
    return (np.ndarray, "meta", a.shape, dtype_key(a.dtype))


def _meta_state(a: np.ndarray) -> tuple:
    return (a.dtype, *map(size, a.shape))


def _module_attrs(
    m: types.ModuleType, attrs: tuple[str, ...], ctx: Ctx, deep: tuple[tuple[str, ...], ...] = ()
) -> Any:
    """`K-module-attrs`: the attributes read from a module (`config.LR`, `os.environ`,
    `jnp.sin`), each by value (and `importlib.reload` is seen). A library module's code (`jnp.sin`,
    `jax.nn`) is constant and left out; its data (`os.environ`, `sys.argv`) is keyed as what it
    is. An attribute the module's dict does not hold, served by a module `__getattr__`, cannot be
    keyed: the reader gets a key equal to nothing."""
    d = m.__dict__
    library = library_module(m)
    parts = []
    t = type(m)
    if t is not types.ModuleType:
        # Its class may serve the attribute instead of its dict (a property, the PEP 549 idiom
        # `sys.modules[__name__].__class__ = M`): what it computes no key sees. The class is
        # keyed (a user's: watched), so a property added later is seen.
        if any(served_by_class(t, attr) for attr in attrs):
            return too_deep(m, ctx)
        parts.append(("__class__", key(t, ctx, False)))
    for attr in attrs:
        v = d.get(attr, MISSING)
        if library and v is not MISSING and library_code_object(v):
            further = tuple(c[1:] for c in deep if c[0] == attr and len(c) > 1)
            if further and isinstance(v, types.ModuleType):
                # `jax.nn.myact`: a library submodule is code, but what is read from it may be
                # the user's (a function assigned to it), keyed as any module attribute is.
                inner = _module_attrs(v, tuple(sorted({c[0] for c in further})), ctx, further)
                if type(inner) is not Namespace:
                    parts.append((attr, inner))
                continue
            if pure_library(v):
                continue
            # `os.getenv`, `np.get_printoptions`, `np.random` (then `.rand`): what it reads when
            # called is library data no key sees.
            parts.append((attr, impure_library(v, ctx)))
            continue
        if v is MISSING and "__getattr__" in d:
            return too_deep(m, ctx)
        if v is MISSING and attr == "__dict__":
            # `config.__dict__["LR"]` may read any name: a user's module is keyed whole, a
            # library's (never walked whole) by nothing.
            return too_deep(m, ctx) if library else key(m, ctx, False)
        ctx.names.append((d, attr, v))
        if v is MISSING:
            # Absent now: a `__getattr__` defined later, or a class swapped in that serves it,
            # would answer the same read, so both are watched.
            ctx.names.append((d, "__getattr__", MISSING))
            ctx.states.append((m, module_class, module_class(m)))
            parts.append((attr, MISSING))
        elif library and _library_state(v):
            parts.append((attr, _library_data(v, ctx)))
        else:
            parts.append((attr, key(v, ctx, False)))
    if library and not parts:
        return Namespace(m)
    return ("module", Namespace(m), tuple(parts))


def _absolute(g: dict, binding: Binding, ctx: Ctx) -> str | None:
    """The absolute name of the module an import statement names, resolved against the function's
    `__package__` (watched) as the import system does; `None` where that is not a plain string."""
    if not binding.level:
        return binding.name
    package = g.get("__package__", MISSING)
    ctx.names.append((g, "__package__", package))
    if type(package) is not str or not package:
        return None
    bits = package.rsplit(".", binding.level - 1)
    if len(bits) < binding.level:
        return None
    return f"{bits[0]}.{binding.name}" if binding.name else bits[0]


def _imported(
    f: types.FunctionType, bindings: tuple[Binding, ...] | None, dynamic: bool, ctx: Ctx
) -> tuple | None:
    """What the import statements in `f`'s body bind, keyed as the same names would be as
    globals: a module read as `local.attr` by those attributes (`K-module-attrs`), anything else
    whole. Each module comes from `sys.modules` now, as the statement will take it, and every
    lookup on the way is watched (a module replaced in `sys.modules` or rebound in its package
    is a new key). `None`, for an identity key, where the statement would run code or look past
    a module's own dict: a shape not recognised, a module not imported yet, a name its module
    lacks, a replaced `__import__`."""
    if bindings is None:
        return None
    held = f.__builtins__
    table = held if type(held) is dict else getattr(held, "__dict__", None)
    if type(table) is not dict or table.get("__import__") is not _IMPORT:
        return None
    ctx.names.append((table, "__import__", _IMPORT))
    parts = []
    for binding in bindings:
        full = _absolute(f.__globals__, binding, ctx)
        if full is None:
            return None
        start = full if binding.from_ else full.partition(".")[0]
        value = None
        for name in dict.fromkeys((full, start)):
            value = sys.modules.get(name, MISSING)
            ctx.names.append((sys.modules, name, value))
            if not isinstance(value, types.ModuleType):
                return None
        for attr in binding.chain:
            if not isinstance(value, types.ModuleType):
                return None
            d = value.__dict__
            value = d.get(attr, MISSING)
            ctx.names.append((d, attr, value))
            if value is MISSING:
                return None
        attrs = None if dynamic else binding.attrs
        if attrs is not None and isinstance(value, types.ModuleType):
            read = _module_attrs(value, attrs, ctx)
        elif (
            isinstance(value, types.ModuleType)
            and library_module(value)
            and not pure_library(value)
        ):
            read = impure_library(value, ctx)  # `import random` used whole
        else:
            read = key(value, ctx, False)
        # Named as a global is (`FunctionKey.globals` pairs), by the dotted path it reads.
        parts.append((".".join((full, *binding.chain)), read))
    return tuple(parts)


@compound
def function(f: types.FunctionType, ctx: Ctx, content_ok: bool) -> Any:
    library = library_function(f)
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
        looked_up = (f.__globals__.get(n, table.get(n)) for n in names)
        dynamic = any(v is d for v in looked_up for d in _DYNAMIC)
        if dynamic:
            # `globals()["c"]`, `eval(...)`: any global may be read, so all of them are keyed
            # (the import system's own objects aside, as for a module read whole).
            names = (*names, *(n for n in f.__globals__ if n not in IMPORT_MADE))
            names = tuple(dict.fromkeys(names))
            counters = frozenset()
        globals_read = tuple(
            (name, _COUNTER)
            if name in counters and type(f.__globals__.get(name)) in (int, float)
            else (name, _global(f.__globals__, name, r, ctx, table))
            for name in names
        )
        bindings = imports(code)
        imported = () if bindings == () else _imported(f, bindings, dynamic, ctx)
        if imported is None:
            return identity(f, ctx)
        globals_read += imported
    return FunctionKey(
        "fn",
        code,
        Namespace(f.__globals__),
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


def _partial_state(p: ft.partial) -> tuple:
    return (p.func, p.args, *dict_state(p.keywords))


@compound
def partial(p: ft.partial, ctx: Ctx, content_ok: bool) -> Any:
    # `functools.partial` and `jax.tree_util.Partial`: the keywords dict is the partial's own
    # (copied when it was made), so it is keyed by contents, and watched. It can still change
    # in place (`p.keywords["k"] = 9.0`), so a partial with keywords (or attributes) is never
    # substituted by `intern`: its equal twin elsewhere reads another dict.
    ctx.states.append((p, _partial_state, _partial_state(p)))
    if p.keywords or owns_data(p):
        ctx.own_eq = True
    # A subclass (one with a `__call__` of its own) is keyed as a class: its methods run.
    return (
        class_part(type(p), ctx),
        key(p.func, ctx, False),
        key(p.args, ctx, False),
        tuple((k, key(v, ctx, False)) for k, v in p.keywords.items()),
        added_state(p, ctx),
    )


@compound
def method(m: types.MethodType, ctx: Ctx, content_ok: bool) -> Any:
    return ("method", key(m.__func__, ctx, False), key(m.__self__, ctx, False))


@compound
def builtin(f: Any, ctx: Ctx, content_ok: bool) -> Any:
    owner = getattr(f, "__self__", None)
    if owner is None or isinstance(owner, types.ModuleType):
        if ctx.depth > 1 and not pure_library(f):
            return impure_library(f, ctx)  # `sys.getrecursionlimit`, `time.time`
        return Namespace(f)
    return ("builtin-method", f.__name__, key(owner, ctx, False))


@compound
def pjit(f: Any, ctx: Ctx, content_ok: bool) -> Any:
    # `jax.jit(fun, **options)` keeps `fun` and every option (JAX internals, read in
    # `_compat.py`): if they move, fall back to identity (`tests/test_compat.py` notices).
    parts = jit_parts(f)
    if parts is None:
        return identity(f, ctx)
    fun, info = parts
    return ("jit", key(fun, ctx, False), key(info, ctx, False))


def library_hashable(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-library-object`, `K-own-eq`: an object of a library class with its own `==`: one of a
    library module's own stateless objects (`jnp.multiply`) is a constant; any other is compared
    by its own `==` (never substituted)."""
    if library_constant(obj):
        return _constant(obj, ctx)
    return own_eq(obj, ctx, content_ok)


def _constant(obj: Any, ctx: Ctx) -> Any:
    # A callable one reached by a reader must be on the allowlist (`np.save`, a dispatcher).
    if ctx.depth > 0 and callable(obj) and not pure_library(obj):
        return impure_library(obj, ctx)
    return Namespace(obj)


def library_object(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-library-object`: an object of a library class with no value semantics. One of a library
    module's own stateless objects (`jax.nn.relu`, a sentinel such as Equinox's `MISSING`) is a
    constant. A mapping, sequence or set (`os.environ`, a `collections.deque`, a weak container)
    is itself and its items, watched. Any other is data the program made at run time (a
    `types.SimpleNamespace`, an `argparse.Namespace`, a `jax.custom_vjp` whose `defvjp` changes a
    rule in place): itself and what it holds now, watched; with nothing Python can read (a C
    object), a callable is itself and anything else a key equal to nothing."""
    if library_constant(obj):
        return _constant(obj, ctx)
    if isinstance(obj, (Mapping, Sequence, Set)):
        return container(obj, ctx, content_ok)
    if getattr(obj, "__dict__", None) is None and not slots_of(type(obj)):
        if isinstance(obj, Sized) and isinstance(obj, Iterable):
            return container(obj, ctx, content_ok)
        if callable(obj) or hasattr(type(obj), "__get__") or _stateless(type(obj)):
            # A C callable, a C descriptor of a class (a NamedTuple's field getter), or an
            # object with no storage at all (`object()`): constants.
            return Namespace(obj)
        return opaque(obj, ctx, content_ok)
    return mutable(obj, ctx, content_ok)


def _stateless(t: type) -> bool:
    # With no `__dict__` and no slots, only a class of C code can hold state (a lock, an
    # `itertools.count`); `object()` and a Python class's instances hold none. Told apart by the
    # instances' size, not by whether the class is a heap type: a lock is one on every Python,
    # and since Python 3.12 so are `itertools`' classes (3.13 keyed a count as a constant). A
    # weak reference slot inside the object is no state.
    size = t.__basicsize__ - (_POINTER if t.__weakrefoffset__ > 0 else 0)
    return t.__itemsize__ == 0 and size == object.__basicsize__


_POINTER = struct.calcsize("P")
