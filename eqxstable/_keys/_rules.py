"""The one table of keying rules: which handler keys an object of a given type.

Read top to bottom, it says what is keyed by value, what by identity and watched, and what is
taken as constant; `README.md` beside this file gives the same table with the reason each rule
is sound. The choice depends on the type only, so it is made once per type.
"""

import collections
import dataclasses
import enum
import functools as ft
import types
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.core import Tracer

from .._compat import flat_module_aux, LEGACY_MODULE_AUX
from .._errors import MSG_HASH_WITHOUT_EQ, StabilityWarning, warn
from . import _callables as c, _values as v
from ._context import compound, Ctx, Handler, identity, key
from ._jaxpr import CLOSED_JAXPR, JAXPR, jaxpr_key
from ._origin import library_class


def _code(obj: types.CodeType, ctx: Ctx, content_ok: bool) -> Any:
    # Code objects compare by value: bytecode, names, line table and constants (type-exactly).
    return (types.CodeType, obj)


@compound
def _jaxpr(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    # A jaxpr is a program: keyed by the equations JAX runs from it (see `_jaxpr.py`), so the
    # same computation closure-converted twice is one key. Jaxprs are immutable by JAX's own
    # convention; one that cannot be read is itself.
    k = jaxpr_key(obj, lambda x: key(x, ctx, False))
    return identity(obj, ctx) if k is None else ("jaxpr", k)


@compound
def _treedef(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    # A structure held as a value: its node types and node data by value, node by node (its
    # own `==` and, on older jaxlib, its pickled state make `1` and `1.0` in node data one key).
    try:
        data = obj.node_data()
        children = obj.children()
    except Exception:  # noqa: BLE001
        return identity(obj, ctx)
    if data is None:
        return ("treedef", obj.num_leaves, obj.num_nodes, str(obj))
    node_type, aux = data
    if flat_module_aux is not None:  # Equinox < 0.13.3: see `_compat.py`.
        data = (node_type, flat_module_aux(aux))
    if node_type in (dict, collections.OrderedDict) and type(aux) is list:
        # A dict node's key list is made afresh by each `node_data()`: nobody else holds it.
        data = (node_type, tuple(aux))
    return ("treedef", key(data, ctx, False), tuple(key(c, ctx, False) for c in children))


def hash_without_eq(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    cls = type(obj)
    warn(MSG_HASH_WITHOUT_EQ.format(cls=f"{cls.__module__}.{cls.__qualname__}"), StabilityWarning)
    return v.mutable(obj, ctx, content_ok)


def _class(cls: type, ctx: Ctx, content_ok: bool) -> Any:
    if library_class(cls):
        return v.constant(cls, ctx, content_ok)
    return v.user_class(cls, ctx, content_ok)


_EXACT: dict[type, Handler] = {
    int: v.value,
    bool: v.value,
    str: v.value,
    bytes: v.value,
    type(None): v.value,
    type(Ellipsis): v.value,
    type(NotImplemented): v.value,
    float: v.float_,
    complex: v.complex_,
    range: v.range_,
    slice: v.slice_,
    tuple: v.tuple_,
    frozenset: v.frozenset_,
    types.CodeType: _code,
    types.FunctionType: c.function,
    types.MethodType: c.method,
    types.BuiltinFunctionType: c.builtin,
    types.ModuleType: v.module,
    c.PjitFunction: c.pjit,
    jax.tree_util.PyTreeDef: _treedef,
    JAXPR: _jaxpr,
    CLOSED_JAXPR: _jaxpr,
    np.ndarray: v.ndarray,
    list: v.mutable,
    dict: v.mutable,
    set: v.mutable,
    bytearray: v.mutable,
    types.MappingProxyType: v.mapping_proxy,
    property: v.descriptor,
    classmethod: v.descriptor,
    staticmethod: v.descriptor,
}

if LEGACY_MODULE_AUX is not None:
    # Equinox < 0.13.3: a module's node data is a `_FlattenedData` (a dataclass, not frozen, so
    # unhashable), made afresh per flatten: keyed by its fields, as the tuple newer Equinox gives
    # is keyed by its items. Otherwise a treedef holding it is a new key per flatten.
    _EXACT[LEGACY_MODULE_AUX] = v.frozen_dataclass


def resolve(t: type) -> Handler:
    """Chooses the handler for objects of exactly type `t`."""
    if t in _EXACT:
        return _EXACT[t]
    if issubclass(t, type):
        return _class
    if issubclass(t, ft.partial):
        return c.partial
    if issubclass(t, enum.Enum):
        return v.enum_
    if issubclass(t, np.generic) and not issubclass(t, np.object_):
        return v.numpy_scalar
    if issubclass(t, (jax.Array, Tracer)):
        # A tracer is not a `jax.Array` subclass: keyed as what it is, this very value of one
        # trace (never a walk of the live trace it belongs to).
        return v.jax_array
    if issubclass(t, np.ndarray):
        return v.mutable  # a subclass may add state of its own
    if issubclass(t, (bool, int, float, complex, str, bytes)):
        return v.builtin_subclass
    if issubclass(t, tuple):
        return v.tuple_subclass
    if issubclass(t, frozenset):
        return v.frozenset_
    if issubclass(t, (list, dict, set, bytearray)):
        return v.mutable
    if dataclasses.is_dataclass(t) and (
        t.__dataclass_params__.frozen  # pyright: ignore[reportAttributeAccessIssue]
        or issubclass(t, eqx.Module)
    ):
        return v.frozen_dataclass
    has_hash = t.__hash__ is not None and t.__hash__ is not object.__hash__
    has_eq = t.__eq__ is not object.__eq__
    if has_hash and has_eq:
        return v.by_reduce
    if has_hash:
        return hash_without_eq
    if library_class(t):
        return c.library_object
    return v.mutable
