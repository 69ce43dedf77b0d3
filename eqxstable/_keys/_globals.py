"""What a Python function reads besides its own slots, keyed as the trace would read it: each
global it loads (falling back on its builtins), the attributes it reads from a module
(`K-module-attrs`, a library's data object one level deep), a global array's shape and dtype, and
what the `import` statements in its body bind. The function itself is keyed by `_functions.py`."""

import builtins
import pathlib
import sys
import types
from collections.abc import Iterable, Mapping, Sequence, Set, Sized
from typing import Any

import jax
import numpy as np

from ._callables import library_object
from ._code import Reads
from ._context import Ctx, key
from ._dtypes import dtype_key
from ._fallbacks import too_deep
from ._imports import Binding
from ._library_mutable import jax_config, shallow
from ._modules import module_class, served_by_class
from ._origin import (
    library_class,
    library_code_object,
    library_constant,
    library_module,
)
from ._per_class import type_ids
from ._pure import pure_library
from ._registries import library_class_data
from ._state import impure_library, slots_of
from ._types import Namespace
from ._watch import MISSING, size


# The import statement's own function, while no one has replaced it in a function's builtins.
_IMPORT = builtins.__import__


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
    if name in r.subscripts and type(value) is tuple:
        return const_items(value, r.subscripts[name], ctx)
    if attrs is not None and isinstance(value, types.ModuleType):
        return _module_attrs(value, attrs, ctx, r.deep.get(name, ()))
    if attrs is not None and type(value) is np.ndarray and _ARRAY_META.issuperset(attrs):
        return array_meta(value, ctx)
    if _concrete_path(type(value)) and attrs and _PATH_TEXT.issuperset(attrs):
        # A concrete path read only for its text (`CFG.name`): keyed by it. Read any other way
        # (`CFG.read_text()`, `CFG / "x"`, passed on), it is what the file system holds, which no
        # key sees, as anywhere a path is reached (`K-path`, `_library.path`).
        return (type(value), str(value))
    if isinstance(value, type) and library_class(value) and not pure_library(value):
        # A library class read by the function: its class methods may read library state
        # (`datetime.now()`). A class met as an object's type is keyed as a class.
        return impure_library(value, ctx)
    return key(value, ctx, False)


def const_items(value: tuple, indices: tuple[int, ...], ctx: Ctx) -> Any:
    """`K-const-subscript`: a global exact `tuple` the function reads only as `TABLE[k]`, each
    `k` an `int` constant in its bytecode (`_code.subscripts`): its length and the items at those
    `k`, each keyed as what it is (a frozen record by value, a list by identity and contents,
    watched as such), never the rest of the table. A tuple cannot change; the global's binding
    is watched by the caller; the function reads nothing else of it. An index out of range is
    keyed as such (the trace raises `IndexError`)."""
    n = len(value)
    return (
        "const-subscript",
        n,
        tuple((k, key(value[k], ctx, False) if -n <= k < n else _OUT) for k in indices),
    )


_OUT = ("index-out-of-range",)


def _concrete_path(t: type) -> bool:
    # By identity: a user's metaclass may call its class equal to `PosixPath`.
    return t is pathlib.PosixPath or t is pathlib.WindowsPath


# What a reader may read of a concrete path without the file system: text, never another path.
_PATH_TEXT = frozenset(
    {"name", "suffix", "suffixes", "stem", "parts", "anchor", "drive", "root", "as_posix"}
    | {"as_uri", "is_absolute", "match", "is_relative_to", "is_reserved"}
)


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
# By identity (`type_ids`): a user's metaclass may call its class equal to `int`.
_PLAIN = type_ids((int, float, complex, str, bytes, bool, type(None)))
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
        if id(type(getattr(v, name, None))) not in _PLAIN:
            return False
    for klass in type(v).__mro__[:-1]:
        for name, value in vars(klass).items():
            if name.startswith("__") and name.endswith("__"):
                continue  # The class's own machinery (`__doc__`, `__slots__`, `__dict__`).
            if not (
                id(type(value)) in _PLAIN
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
    gets a key equal to nothing. JAX's configuration is keyed by every flag's value
    (`jax_config`): its trace context holds only some."""
    if v is jax.config:
        return jax_config(v, ctx)
    if _flat_library_data(v):
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
            if isinstance(v, type):
                # A library class's code is constant; its plain class attributes are data
                # (`eqx.nn.Linear.SCALE = 3.0`: `K-library-code`).
                data = library_class_data(v, ctx)
                if data:
                    parts.append((attr, data))
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
