"""eqxstable: rebuilt Equinox modules that do not recompile."""

import importlib.metadata

from ._caches import clear_caches as clear_caches
from ._errors import (
    RecompileError as RecompileError,
    RecompileWarning as RecompileWarning,
    RegistryError as RegistryError,
    StabilityWarning as StabilityWarning,
    StaleProgramError as StaleProgramError,
)
from ._field import field as field
from ._jit import (
    CacheInfo as CacheInfo,
    filter_jit as filter_jit,
    Miss as Miss,
    no_recompiles as no_recompiles,
    report as report,
)
from ._keys import stable_key as stable_key
from ._module import StableModule as StableModule
from ._registry import intern as intern, lookup as lookup, register as register
from ._stabilize import stabilize as stabilize


__version__ = importlib.metadata.version("eqxstable")
