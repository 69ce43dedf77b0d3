"""The module layer: see `README.md` beside this file."""

from ._field import field as field
from ._module import StableModule as StableModule
from ._stabilize import stabilize as stabilize
from ._static import Static as Static
from ._views import VIEW_BASES as VIEW_BASES
