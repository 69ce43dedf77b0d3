"""The allowlist of a jaxpr equation's parameters keyed by value (`K-jaxpr`): anything else a
parameter holds (a `custom_jvp`'s rule, a `WrappedFun` that may hold the live trace that made the
jaxpr, a callback's wrapper) is itself, never walked (`_jaxpr._param`).
"""

import enum
import functools
import types
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.extend import core as jcore

from ._origin import library_class
from ._per_class import PerClass, type_ids


# Kinds of parameter keyed by value (by `key_of`, which keys them by the keys layer's rules): the
# allowlist. Exact tuples and jaxprs are keyed item by item in `_jaxpr._param` itself.
_VALUE_PARAMS = (
    str,
    bytes,
    type(None),
    np.dtype,
    np.generic,
    enum.Enum,
    # Callables by the contract's rule for them (`K-function`, `K-partial`, `K-method`): a
    # lineax operator's functions in an Equinox primitive's static parameter.
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    functools.partial,
)


def value_param(value: Any) -> bool:
    t = type(value)
    if isinstance(value, _VALUE_PARAMS) or id(t) in _VALUE_TYPES:
        return True
    if isinstance(value, tuple):
        # A NamedTuple of JAX's (`ConvDimensionNumbers`, `GatherDimensionNumbers`) or a
        # `PartitionSpec`: a value when all it holds is.
        return all(isinstance(v, (jcore.Jaxpr, jcore.ClosedJaxpr)) or value_param(v) for v in value)
    if isinstance(value, eqx.Module):
        return True  # Keyed by its fields, as a static argument is (`K-frozen-dataclass`).
    known = _JAX_VALUE_TYPES.get(id(t))
    if known is None:
        # JAX's own immutable values (abstract values, shardings, meshes, layouts, effects,
        # tree structures): hashable, no function, no array. JAX's by where its code lives
        # (`library_class`), not only by the `__module__` a user's class may claim.
        module = getattr(t, "__module__", "") or ""
        known = (
            (module == "jax" or module.startswith(("jax.", "jaxlib")))
            and library_class(t)
            and not callable(value)
            and not isinstance(value, jax.Array)
            and getattr(t, "__hash__", None) is not None
            and t is not WRAPPED_FUN
        )
        _JAX_VALUE_TYPES.put(t, known)
    return known


# By the types' identities (`type_ids`), and per class held weakly (`PerClass`): a user's
# metaclass may call its class equal to one of these.
_VALUE_TYPES = type_ids((jax.tree_util.PyTreeDef, frozenset))
_JAX_VALUE_TYPES: PerClass[bool] = PerClass()
try:  # The class of a transformation rule's thunk (`jax.extend` has it from JAX 0.4.14).
    from jax.extend.linear_util import WrappedFun as WRAPPED_FUN
except ImportError:  # pragma: no cover
    WRAPPED_FUN = None
