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
from typing import Any


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


@ft.lru_cache(maxsize=4096)
def library_file(filename: str) -> bool:
    """Whether code compiled from `filename` belongs to an installed package or the standard
    library. `<frozen ...>` is the standard library; other `<...>` names (`<string>`, `<stdin>`,
    notebook cells) are the user's."""
    if filename.startswith("<"):
        return filename.startswith("<frozen ")
    return os.path.realpath(filename).startswith(_ROOTS)


def library_code(code: types.CodeType) -> bool:
    return library_file(code.co_filename)


def library_module(module: types.ModuleType) -> bool:
    """Whether a module is a constant: built into the interpreter, or loaded from a library file.
    A module without a file that is not built in (made with `types.ModuleType`) is the user's."""
    name = getattr(module, "__name__", None)
    if name in sys.builtin_module_names:
        return True
    filename = getattr(module, "__file__", None)
    if isinstance(filename, str):
        return library_file(filename)
    # A submodule made by an extension module (`jaxlib._jax.pytree`) has no file: its package's
    # decides. A module made with `types.ModuleType` has none, nor a package: it is the user's.
    parent = name.rpartition(".")[0] if isinstance(name, str) else ""
    package = sys.modules.get(parent) if parent else None
    return package is not None and library_module(package)


@ft.cache
def library_class(cls: type) -> bool:
    """Whether a class is a constant: the file of its first method decides, else (a class of data
    only) the file of the module it names."""
    for value in vars(cls).values():
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        if isinstance(code, types.CodeType):
            return library_code(code)
    name = getattr(cls, "__module__", None) or ""
    # An extension module's classes may name a submodule that is not in `sys.modules`
    # (`jaxlib._jax.pytree`): its package decides.
    while name and name not in sys.modules:
        name = name.rpartition(".")[0]
    module = sys.modules.get(name)
    if module is None:
        return cls.__module__ == "builtins"
    return library_module(module)


def library_callable(f: Any) -> bool:
    """Whether a function's code lives in a library (its closure cells are still the caller's)."""
    code = getattr(f, "__code__", None)
    return isinstance(code, types.CodeType) and library_code(code)
