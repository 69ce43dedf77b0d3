"""The stable `filter_jit` layer: see `README.md` beside this file.

This file is the layer's only door. The package's public names come from here, and so does every
name the tools (the doctor, `eqxstable/_doctor/`, and the pytest plugin) use, as Equinox's tools
use `equinox.internal`: a tool never imports a module of this folder, so what the tools depend on
is this list, and a module can be split or renamed without reading them. `tests/test_house.py`
keeps it so.
"""

from . import _fingerprint
from ._accounting import (
    CacheInfo as CacheInfo,
    COMPILE_EVENT as COMPILE_EVENT,
    current as current,
    live_wrappers as live_wrappers,
    LOWER_EVENT as LOWER_EVENT,
    Miss as Miss,
    miss_listeners as miss_listeners,
    not_compiled as not_compiled,
    TRACE_EVENT as TRACE_EVENT,
)
from ._advice import rebound_advice as rebound_advice
from ._bind import Binder as Binder
from ._cache import Cache as Cache
from ._describe import describe_change as describe_change
from ._entry import Entry as Entry, leaves_of_first_arg as leaves_of_first_arg
from ._explain import diff as diff, explain_stable_miss as explain_stable_miss
from ._filter_jit import filter_jit as filter_jit
from ._fingerprint import (
    input_key as input_key,
    reusable as reusable,
    TRACE_ONLY as TRACE_ONLY,
    tree_key as tree_key,
    under_a_trace as under_a_trace,
)
from ._fun import (
    FunParts as FunParts,
    program_key as program_key,
    split_fun as split_fun,
    static_key as static_key,
)
from ._guards import no_recompiles as no_recompiles, no_recompiles_within as no_recompiles_within
from ._lru import sizes as sizes
from ._outputs import Mixed as Mixed, split_output as split_output
from ._pinned import (
    fun_identity as fun_identity,
    runs_python as runs_python,
    same_fun as same_fun,
)
from ._program import fun_names as fun_names, unpinned_place as unpinned_place
from ._report import report as report
from ._signature import (
    argument_path as argument_path,
    array_leaf as array_leaf,
    ArrayLeaf as ArrayLeaf,
    short_repr as short_repr,
    Signature as Signature,
    signature as signature,
    with_function_arrays as with_function_arrays,
)


# Names of `_fingerprint.py` that would say too little outside it.
FINGERPRINT_AVAILABLE = _fingerprint.AVAILABLE
fingerprint_key_of = _fingerprint.key_of
fingerprint_param_key = _fingerprint.param_key
trace_context = _fingerprint.context
