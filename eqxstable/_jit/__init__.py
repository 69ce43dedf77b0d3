"""The stable `filter_jit` layer: see `README.md` beside this file."""

from ._accounting import CacheInfo as CacheInfo, Miss as Miss
from ._filter_jit import filter_jit as filter_jit
from ._guards import no_recompiles as no_recompiles
from ._report import report as report
from ._signature import diff as diff, Signature as Signature, signature as signature
