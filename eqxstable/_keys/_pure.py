"""The allowlist of library callables that compute from their arguments only (`pure_library`,
`K-impure-library`): a library's callable, class or module not on it may read library data or
hidden state that no key sees, and its reader is then identity-keyed.

What is a library's at all (and its code rather than its data) is `_origin.py`'s decision.
"""

import functools as ft
import types
from typing import Any

from ._origin import library_code_object


# Packages and modules whose functions and classes compute from their arguments alone (JAX's also
# from JAX's configuration, which JAX's own caches key): a callable is judged by the module its
# code is defined in (its namespace, never its `__module__`), this name or a submodule of it.
_PURE = frozenset(
    (
        "jax jaxlib equinox optax diffrax optimistix lineax jaxtyping eqxstable "
        # NumPy's array functions and math (its print options, error state, files and global
        # random state are left out below).
        "numpy._core numpy.core numpy.lib numpy.linalg numpy.fft numpy.polynomial "
        # The standard library's computation on values.
        "builtins math cmath operator _operator functools _functools itertools contextlib abc "
        "_abc typing typing_extensions dataclasses collections _collections _collections_abc "
        "enum copy types numbers bisect _bisect heapq _heapq struct _struct"
    ).split()
)
# This module exactly (not its submodules): NumPy's classes and ufuncs name `numpy`, while
# `numpy.random`'s functions read a global generator.
_PURE_EXACT = frozenset({"numpy"})
# Modules, and `module.name` callables, under those that read library data, files or hidden state.
_IMPURE = frozenset(
    (
        "numpy._core.arrayprint numpy.core.arrayprint numpy._core._ufunc_config "
        "numpy.core._ufunc_config numpy._core.memmap numpy.core.memmap "
        "numpy._core._multiarray_umath.fromfile numpy.core._multiarray_umath.fromfile "
        "numpy.lib._npyio_impl numpy.lib.npyio numpy.lib.format numpy.lib._format_impl "
        "numpy.lib._datasource numpy._core.records.fromfile numpy.core.records.fromfile "
        "numpy.lib._utils_impl numpy.lib.utils jax._src.numpy.lax_numpy.load "
        "equinox._serialisation builtins.open builtins.input builtins.breakpoint builtins.help "
        "builtins.__import__ builtins.globals builtins.locals builtins.vars builtins.eval "
        "builtins.exec "
        # Evaluating annotations: string ones (every one under `from __future__ import
        # annotations`) are names looked up in a module's globals at call time (attack 12a-07).
        "typing.get_type_hints typing_extensions.get_type_hints typing.evaluate_forward_ref "
        "typing_extensions.evaluate_forward_ref typing._eval_type typing.ForwardRef"
    ).split()
)


def _pure_name(module: Any, name: Any) -> bool:
    # Exactly `str`s: the cache, and the tables, look names up by `==`, which a subclass may
    # define to call itself a pure module's name (and `1`, `1.0` and `True` are one key there).
    return type(module) is str and type(name) is str and _pure_str(module, name)


@ft.lru_cache(maxsize=8192)
def _pure_str(module: str, name: str) -> bool:
    if not module:
        return False
    parts = module.split(".")
    prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
    if any(p in _IMPURE for p in prefixes) or f"{module}.{name}" in _IMPURE:
        return False
    return module in _PURE_EXACT or any(p in _PURE for p in prefixes)


# Decisions already made for modules, classes and module-level builtins, by `id` (each held with
# its object, which its module holds for good anyway). Functions and bound methods are made
# afresh (a library's closures, `obj.method`): decided each time from their code's module name
# (`_pure_name`, cached), never held here.
_decided: dict[int, tuple[Any, bool]] = {}


def pure_library(obj: Any) -> bool:
    """Whether a library's callable, class or module is known to compute from its arguments only
    (`jnp.sin`, `jax.nn.relu`, `optax.adam`, `math.sqrt`, `np.sum`), so that what it reads when
    called is what its caller passes: on the allowlist above. Any other (`os.getenv`,
    `np.get_printoptions`, `logging.getLogger`, `sys.getrecursionlimit`, `random.random`, a
    bound method of a library object) may read library data or hidden state that no key sees:
    its reader is then identity-keyed."""
    hit = _decided.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    try:
        answer = _pure_library(obj, 0)
    except Exception:  # A hostile `__getattr__`.
        answer = False
    if isinstance(obj, (types.ModuleType, type)) or (
        isinstance(obj, types.BuiltinFunctionType)
        and (obj.__self__ is None or isinstance(obj.__self__, (types.ModuleType, type)))
    ):
        _decided[id(obj)] = (obj, answer)
    return answer


def _pure_library(obj: Any, depth: int) -> bool:
    if depth > 8:
        return False
    if isinstance(obj, types.ModuleType):
        # By its name: a function reading `jax.lax.scan` or `optax.adam` reads the module
        # `jax.lax` or `optax` for an attribute its bytecode does not show (nor what a module
        # read whole is used for); a module is on the list with its package.
        name = obj.__name__
        return _pure_name(name, "") and name not in _PURE_EXACT
    if isinstance(obj, type):
        return _pure_name(*_class_definer(obj))
    if isinstance(obj, types.FunctionType):
        names = obj.__globals__.get("__name__")
        return _pure_name(names, obj.__code__.co_name) and _pure_inner(obj, depth)
    if isinstance(obj, (types.MethodType, types.BuiltinFunctionType)):
        owner = obj.__self__
        if isinstance(obj, types.MethodType):
            inner = _pure_library(obj.__func__, depth + 1)
        elif owner is None or isinstance(owner, types.ModuleType):
            module = getattr(owner, "__name__", None) or obj.__module__
            return _pure_name(module, obj.__name__)
        else:
            inner = True
        # A method of a module or a class reads what its arguments say; one of an object reads
        # that object's state (a `random.Random`, NumPy's global `RandomState`).
        return inner and isinstance(owner, (type, types.ModuleType))
    if not callable(obj):
        return True
    return _pure_inner(obj, depth) and _pure_name(*_class_definer(type(obj)))


def _pure_inner(obj: Any, depth: int) -> bool:
    """Whether the library code a library wrapper runs is on the list too (`np.printoptions` is
    `contextlib`'s wrapper of a function reading NumPy's print options; a NumPy dispatcher
    runs its `_implementation`). A user's function it wraps (`jax.grad(f)`) is keyed as the
    wrapper's cell, by the usual rules."""
    for attr in ("__wrapped__", "_implementation"):
        inner = getattr(obj, attr, None)
        if (
            inner is not None
            and inner is not obj
            and library_code_object(inner)
            and not _pure_library(inner, depth + 1)
        ):
            return False
    return True


def _class_definer(cls: type) -> tuple[Any, Any]:
    """The module a class is defined in: that of a method of its own body (NumPy's `memmap` says
    `__module__ == "numpy"`), else its `__module__` (a class of C code)."""
    prefix = f"{cls.__qualname__}."
    for value in vars(cls).values():
        f = getattr(value, "__func__", value)
        if isinstance(f, types.FunctionType) and f.__qualname__.startswith(prefix):
            return f.__globals__.get("__name__"), cls.__qualname__
    return cls.__module__, cls.__qualname__
