"""eqxstable: rebuilt Equinox modules that do not recompile."""

import importlib
import importlib.metadata
import typing

from ._caches import clear_caches as clear_caches
from ._errors import (
    RecompileError as RecompileError,
    RecompileWarning as RecompileWarning,
    RegistryError as RegistryError,
    StabilityWarning as StabilityWarning,
    StaleProgramError as StaleProgramError,
)
from ._moved import install as _install_moved


# Pickles made before the module layer moved into `_module/` name its old paths.
_install_moved()

if typing.TYPE_CHECKING:
    from ._jit import (
        CacheInfo as CacheInfo,
        filter_jit as filter_jit,
        Miss as Miss,
        no_recompiles as no_recompiles,
        report as report,
    )
    from ._keys import stable_key as stable_key
    from ._module import field as field, stabilize as stabilize, StableModule as StableModule
    from ._registry import intern as intern, lookup as lookup, register as register


try:
    __version__ = importlib.metadata.version("eqxstable")
except importlib.metadata.PackageNotFoundError:  # Run from a source tree that is not installed.
    __version__ = "0+unknown"

# The names that need JAX and Equinox are imported when first used: the pytest plugin (an entry
# point, loaded by every pytest run wherever eqxstable is installed) imports this package, and
# must not import JAX or Equinox into other projects' test sessions (jaxtyping's import hook
# refuses to instrument a package that is already imported).
_LAZY = {
    "field": "._module",
    "CacheInfo": "._jit",
    "filter_jit": "._jit",
    "Miss": "._jit",
    "no_recompiles": "._jit",
    "report": "._jit",
    "stable_key": "._keys",
    "StableModule": "._module",
    "intern": "._registry",
    "lookup": "._registry",
    "register": "._registry",
    "stabilize": "._module",
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
