"""Where code lives: installed packages and the standard library are constants, the rest is the
user's and is keyed by value.

The decision is made from the file a code object was compiled from (or a module's `__file__`),
never from `__module__`, which `functools.wraps` copies: a user function decorated with
`functools.wraps(jax.nn.gelu)` says `__module__ == "jax.nn"` but lives in the user's file.
"""

import functools as ft
import os
import site
import sys
import sysconfig
import types
from collections.abc import Iterable, Sized
from typing import Any

import jax

from ._per_class import per_class, PerClass


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {
        paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths
    }
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # Some virtualenvs ship an old `site` without it.
        pass
    user_site = getattr(site, "USER_SITE", None)
    if user_site:
        roots.add(user_site)
    # eqxstable itself: its wrappers and helpers are defined once and never edited by a user.
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots if r))


_ROOTS = _library_roots()
_OWN_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "")


def library_file(filename: str) -> bool:
    """Whether code compiled from `filename` belongs to an installed package or the standard
    library. `<frozen ...>` is the standard library; other `<...>` names (`<string>`, `<stdin>`,
    notebook cells) are the user's, as is a name that is not exactly a `str`: a code object's
    `co_filename` may be a subclass whose `==` calls it a library's path, and the cache looks
    names up by `==`."""
    return type(filename) is str and _library_file(filename)


@ft.lru_cache(maxsize=4096)
def _library_file(filename: str) -> bool:
    if filename.startswith("<"):
        return filename.startswith("<frozen ")
    return os.path.realpath(filename).startswith(_ROOTS)


def library_code(code: types.CodeType) -> bool:
    return library_file(code.co_filename)


def library_function(f: types.FunctionType) -> bool:
    """Whether a function's code is a constant: compiled from a library file, or generated at run
    time (`exec`, `eval`: a `<...>` pseudo-file such as `<string>` or `<@beartype(...)>`) into
    the namespace of a library module, as the methods `dataclasses` writes for a library's
    dataclass or a wrapper that beartype makes of a library function. Generated code is where
    its globals are: code generated into the user's module or into a dict of its own (a user's
    `exec(source, namespace)`, whose namespace may change) is the user's, and what it reads is
    keyed."""
    code = f.__code__
    if library_code(code):
        return True
    filename = code.co_filename
    return filename.startswith("<") and _library_namespace(f.__globals__)


def _library_namespace(namespace: Any) -> bool:
    name = namespace.get("__name__") if type(namespace) is dict else None
    # `__main__` is whatever runs now (a test runner's, a notebook kernel's): never a library's.
    if not isinstance(name, str) or name == "__main__":
        return False
    module = sys.modules.get(name)
    return module is not None and vars(module) is namespace and library_module(module)


def library_module(module: types.ModuleType) -> bool:
    """Whether a module is a constant: built into the interpreter, or loaded from a library file.
    A module without a file that is not built in (made with `types.ModuleType`) is the user's."""
    name = getattr(module, "__name__", None)
    # Exactly a `str`: a subclass's `==` could call itself any builtin module's name.
    if type(name) is str and name in sys.builtin_module_names:
        return True
    filename = getattr(module, "__file__", None)
    if isinstance(filename, str):
        return library_file(filename)
    # A submodule made by an extension module (`jaxlib._jax.pytree`) has no file: its package's
    # decides. A module made with `types.ModuleType` has none, nor a package: it is the user's.
    parent = name.rpartition(".")[0] if isinstance(name, str) else ""
    package = sys.modules.get(parent) if parent else None
    return package is not None and library_module(package)


# `type.__flags__` bits: a class defined in C (not a heap type), or one made immutable, has no
# Python code to edit and no attribute that can be assigned.
_HEAPTYPE = 1 << 9
_IMMUTABLETYPE = 1 << 8


_classes: PerClass[bool] = PerClass()


def library_class(cls: type) -> bool:
    """Whether a class is a constant (see `_library_class`), remembered per class: but "no" only
    once the module the class names has finished importing (a library's class keyed while its
    package is still being imported, by a decorator that jits at import time, is not yet held
    by the package under its name)."""
    known = _classes.get(id(cls))
    if known is None:
        known = _library_class(cls)
        if known or not _importing(getattr(cls, "__module__", None)):
            _classes.put(cls, known)
    return known


def _importing(name: Any) -> bool:
    while isinstance(name, str) and name:
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if getattr(spec, "_initializing", False):
            return True
        name = name.rpartition(".")[0]
    return False


def _library_class(cls: type) -> bool:
    """Whether a class is a constant: a class of C code; else the file of a method defined in its
    own body decides; else (a class of data only) whether it is the attribute its name says of a
    library module. Anything else is the user's: keyed by value, which is always sound.

    `__module__` alone never decides: a class made by `exec` in a namespace named `"__main__"`
    (a notebook cell, a test runner's `python -m`) names whatever module `__main__` is now."""
    flags = cls.__flags__
    if not flags & _HEAPTYPE or flags & _IMMUTABLETYPE:
        return True
    prefix = f"{cls.__qualname__}."
    for value in vars(cls).values():
        f = getattr(value, "__func__", value)
        code = getattr(f, "__code__", None)
        if not isinstance(code, types.CodeType):
            continue
        if not hasattr(code, "co_qualname"):
            # Python 3.10: the qualified name is the function's, which `functools.wraps` copies
            # (`dataclasses` wraps `__repr__` so): the function it wraps is the method.
            f = _unwrapped(f)
            code = f.__code__
        # A method of its own body, not a function assigned to it (`loss = optax.l2_loss`),
        # nor one that `dataclasses` or `collections` generated for it.
        qualname = getattr(code, "co_qualname", None) or getattr(f, "__qualname__", "")
        if isinstance(qualname, str) and qualname.startswith(prefix):
            # Code generated at run time is where its globals are (`library_function`): on
            # Python 3.10 a dataclass's generated `__init__` has the class's qualified name,
            # and `<string>` made every library dataclass the user's (jaxtyping's `_NamedDim`,
            # walked as a user's class in every annotation's key).
            return library_function(f) if type(f) is types.FunctionType else library_code(code)
    return _named_in_library_module(cls, cls.__qualname__, extension_ok=True)


def _unwrapped(f: Any) -> Any:
    # The function `functools.wraps` says `f` wraps, read from its own dict (no `__getattr__`),
    # as long as it is a function: at most a few levels.
    for _ in range(8):
        inner = getattr(f, "__dict__", {}).get("__wrapped__")
        if type(inner) is not types.FunctionType:
            break
        f = inner
    return f


@per_class
def own_class(cls: type) -> bool:
    """Whether a class is eqxstable's own (its `filter_jit` wrapper, a frozen dataclass compared
    by identity whose fields are by design what it computes with): found under its name in a
    module of this package."""
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    filename = getattr(module, "__file__", None)
    return (
        isinstance(filename, str)
        and os.path.realpath(filename).startswith(_OWN_ROOT)
        and _named_in_library_module(cls, cls.__qualname__)
    )


def _named_in_library_module(obj: Any, qualname: Any, extension_ok: bool = False) -> bool:
    """Whether `obj` is what a library module holds under the name `obj` says it has (read from
    the module's dict: a module `__getattr__` may warn). With `extension_ok`, any object naming
    an extension module (whose classes need not be reachable by name: `_abc._abc_data`)."""
    name = getattr(obj, "__module__", None)
    if not isinstance(name, str) or not isinstance(qualname, str):
        return False
    # An extension module's classes may name a submodule that is not in `sys.modules`
    # (`jaxlib._jax.pytree`): its package decides.
    while name and name not in sys.modules:
        name = name.rpartition(".")[0]
    module = sys.modules.get(name)
    if module is None or not library_module(module):
        return False
    if extension_ok and not str(getattr(module, "__file__", None) or "").endswith(".py"):
        return True  # Built in, or compiled: Python code cannot define a class there.
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, "__dict__", {}).get(part, _NOT_FOUND)
    if found is not obj and isinstance(obj, type):
        # A class whose names say where it was made, held by the module it names under another
        # name (`jax.Array`, named `jaxlib._jax.Array`, is `Array` in `jax`).
        return any(v is obj for v in vars(module).values())
    return found is obj


_NOT_FOUND = object()


# Library objects found in their module (kept alive by the module anyway), by `id`.
_constants: dict[int, Any] = {}


def _has_state(obj: Any) -> bool:
    """Whether an object holds something Python can read and change: items (a mapping, a list,
    `os.environ`), or attributes. A callable's attributes are its code's (`jax.nn.relu`, a
    `jax.custom_jvp`, holds its rules), which the library constant rule covers."""
    if isinstance(obj, (Sized, Iterable)):
        return True
    if callable(obj):
        return False
    d = getattr(obj, "__dict__", None)
    return bool(d) or any(hasattr(obj, name) for name in _slots(type(obj)))


def _slots(cls: type) -> tuple[str, ...]:
    return tuple(
        name
        for c in cls.__mro__
        for name in getattr(c, "__slots__", ())
        if isinstance(name, str) and name not in ("__dict__", "__weakref__")
    )


def library_constant(obj: Any) -> bool:
    """Whether an object of a library class is one of a library module's own objects, made once
    when the package was imported, *and* code rather than data: `jax.nn.relu` (a `jax.custom_jvp`
    named by its `__module__` and `__qualname__`), a stateless sentinel such as Equinox's
    `MISSING` (held by the module of its class). Never a container or an object with state,
    wherever it lives (`os.environ`, a package's config object): that is the program's data, as
    are the objects a library class makes at run time (a `types.SimpleNamespace`)."""
    if _constants.get(id(obj)) is obj:
        return True
    if isinstance(obj, CONFIG_HOLDERS):
        # `jax.enable_checks`: made once, held by JAX's config module, with no state of its own
        # to see, yet its `.value` is JAX's configuration now (`K-module-attrs`).
        return False
    try:
        if _has_state(obj):
            return False
        found = _named_in_library_module(obj, getattr(obj, "__qualname__", None))
        if not found:
            module = sys.modules.get(getattr(type(obj), "__module__", None) or "")
            found = (
                module is not None
                and library_module(module)
                and any(v is obj for v in vars(module).values())
            )
    except Exception:  # A hostile `__getattr__` or `__dict__`.
        return False
    if found:
        _constants[id(obj)] = obj
    return found


# JAX's configuration holders (`jax.enable_checks`, a `State`), whose value is data; a JAX
# without them names none.
CONFIG_HOLDERS: tuple[type, ...] = tuple({type(getattr(jax, "enable_checks", jax.config))})

# The code of every function `functools.singledispatch` makes (one code object for all).
SINGLEDISPATCH_CODE = ft.singledispatch(lambda x: x).__code__  # pyright: ignore


def library_code_object(obj: Any) -> bool:
    """Whether an attribute read from a library module is its *code*, taken as constant with the
    module (`jnp.sin`, `jax.nn`, `np.ndarray`, `len`, `jax.nn.relu`), rather than its *data*
    (`os.environ`, `sys.argv`, a dict or a number a package keeps), which is keyed as what it
    is and watched. A user function assigned to a library module is the user's."""
    if isinstance(obj, types.ModuleType):
        return library_module(obj)
    if isinstance(obj, type):
        return library_class(obj)
    if isinstance(obj, types.FunctionType):
        # A `functools.singledispatch` function's registry is the program's data
        # (`@lx.diagonal.register(MyOp)`): keyed by it (`K-dispatch`), never left out as code.
        return library_code(obj.__code__) and obj.__code__ is not SINGLEDISPATCH_CODE
    if isinstance(obj, types.MethodType):
        return library_code_object(obj.__func__)
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return True
    return library_class(type(obj)) and library_constant(obj)


library_file.cache_clear = _library_file.cache_clear  # pyright: ignore[reportFunctionMemberAccess]
