"""The one table of keying rules: which handler keys an object of a given type.

Read top to bottom, it says what is keyed by value, what by identity and watched, and what is
taken as constant; `README.md` beside this file gives the same table with the reason each rule
is sound. The choice depends on the type only, so it is made once per type.
"""

import array
import collections
import dataclasses
import datetime
import decimal
import enum
import fractions
import functools as ft
import inspect
import mmap
import pathlib
import re
import sys
import types
import uuid
import weakref
import zoneinfo
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.core import Tracer

from .._compat import flat_module_aux, LEGACY_MODULE_AUX
from .._errors import MSG_HASH_WITHOUT_EQ, StabilityWarning, warn
from . import (
    _arrays as arr,
    _callables as c,
    _classes as cl,
    _closure_function as clo,
    _functions as fn,
    _jaxtyping as jt,
    _library as lib,
    _library_mutable as lmut,
    _modules as mod,
    _mutable as mut,
    _primitives as prim,
    _registries as reg,
    _values as v,
)
from ._bytes import ArrayState
from ._canonical_forms import canonical_form
from ._context import compound, Ctx, Handler, key
from ._fallbacks import identity
from ._jaxpr import CLOSED_JAXPR, JAXPR, jaxpr_key, PRIMITIVE
from ._origin import CONFIG_HOLDERS, library_class, own_class
from ._per_class import TypeTable
from ._state import impure_library, unreadable
from ._types import Identity, MutableKey


def _code(obj: types.CodeType, ctx: Ctx, content_ok: bool) -> Any:
    # Code objects compare by value: bytecode, names, line table and constants (type-exactly).
    return (types.CodeType, obj)


@compound
def _jaxpr(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    # A jaxpr is a program: keyed by the equations JAX runs from it (see `_jaxpr.py`), so the
    # same computation closure-converted twice is one key. Jaxprs are immutable by JAX's own
    # convention, but a NumPy literal or constant may be the user's array, which the jaxpr
    # holds by reference: one that can be written is watched and makes the jaxpr one that
    # `intern` never substitutes (`_changeable`). One that cannot be read is itself.
    primitives: dict[int, tuple] = {}

    def key_of(x: Any) -> Any:
        if isinstance(x, PRIMITIVE):
            return _primitive(x, ctx, primitives)
        return key(x, ctx, False)

    # A parameter of a kind not known to be a value (a `custom_jvp`'s rule, which may hold the
    # live trace that made the jaxpr) is this very object, never walked (`_jaxpr._param`).
    k = jaxpr_key(
        obj,
        key_of,
        changeable=lambda a, data: _changeable(a, data, ctx),
        opaque=lambda x: identity(x, ctx),
    )
    return identity(obj, ctx) if k is None else ("jaxpr", k)


def _changeable(array: Any, data: bytes, ctx: Ctx) -> None:
    # Keyed by its bytes (`_jaxpr_values.value_key`), as two jaxprs of one computation hold two
    # arrays; watched, as `K-array-reached` is; and never substituted: an equal jaxpr elsewhere
    # reads another array, which may be written later (`x * w` with `w` a 0-d array of the user's).
    ctx.own_eq = True
    ctx.blobs.append((array, ArrayState(array, data)))


def _primitive(p: Any, ctx: Ctx, seen: dict[int, tuple]) -> Any:
    """An equation's primitive, keyed as what it is (a library object: itself and its
    attributes, watched) in a computation of its own sharing this one's walk. Where its key
    names the primitive itself (`MutableKey`), any two equal keys hold this very object, so
    whatever its attributes reach (JAX's rules: functions with keyword-only defaults, partials)
    is read by both from the same objects, and does not stop `intern` from substituting the
    jaxpr; anything else they bring (watches, identity) is kept. Its own memo keeps what is met
    inside it from being reused elsewhere in this key without its flags."""
    known = seen.get(id(p))
    if known is not None:
        return known[1]
    inner = Ctx(ctx.by_value)
    inner.stack = ctx.stack
    inner.depth = ctx.depth
    parts = key(p, inner, False)
    ctx.extend(inner.watch())
    ctx.identity |= inner.identity
    ctx.copied_arrays |= inner.copied_arrays
    names_itself = type(parts) is MutableKey and parts.identity == Identity(p)
    ctx.own_eq |= inner.own_eq and not names_itself
    seen[id(p)] = (p, parts)
    return parts


@compound
def _treedef(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    # A structure held as a value: its node types and node data by value, node by node (its
    # own `==` and, on older jaxlib, its pickled state make `1` and `1.0` in node data one key).
    try:
        if obj.num_nodes > _PLAIN_FROM and (text := _plain_text(obj)) is not None:
            return ("treedef-plain", text)
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


# A large structure of tuples, lists and `None` only (attack 15b-05: a static treedef of 12,000
# leaves walked node by node ran past the object budget, and every call traced): its text names
# every node exactly (`(*, None)`, `[*]`, `(*,)`), and it holds no node data to key.
_PLAIN_FROM = 512


def _plain_text(treedef: Any) -> str | None:
    """The text of `treedef` where every node is a tuple, a list or `None` (no node data
    anywhere: JAX's walk, in C, hands each node's data to `seen`; no other node type in its
    text), else `None`."""
    data: list = []
    seen = data.append
    treedef.walk(lambda _, d: seen(d), lambda _: None, [None] * treedef.num_leaves)
    if any(d is not None for d in data):
        return None
    text = str(treedef)
    return None if "CustomNode" in text else text


def hash_without_eq(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    cls = type(obj)
    warn(MSG_HASH_WITHOUT_EQ.format(cls=f"{cls.__module__}.{cls.__qualname__}"), StabilityWarning)
    return mut.mutable(obj, ctx, content_ok)


def _class(cls: type, ctx: Ctx, content_ok: bool) -> Any:
    if jt.made_by_jaxtyping(cls):
        return jt.annotation_class(cls, ctx, content_ok)  # K-jaxtyping-array
    if library_class(cls):
        return reg.library_class(cls, ctx)
    return cl.user_class(cls, ctx, content_ok)


# Exact types. A subclass of one of these is not on the allowlist by that row: it may add state or
# behaviour of its own (it falls to the rows below, by what it is).
# By identity (`TypeTable`): a user's metaclass may call its class equal to `int`.
_EXACT: TypeTable[Handler] = TypeTable(
    {
        # K-value
        int: v.value,
        bool: v.value,
        str: v.value,
        bytes: v.value,
        type(None): v.value,
        type(Ellipsis): v.value,
        type(NotImplemented): v.value,
        # K-float
        float: v.float_,
        complex: v.complex_,
        # K-range
        range: v.range_,
        slice: v.slice_,
        # K-tuple
        tuple: v.tuple_,
        frozenset: v.frozenset_,
        # K-value: code objects compare by value (bytecode, names, constants)
        types.CodeType: _code,
        # K-function, K-library-code, K-method, K-jit
        types.FunctionType: fn.function,
        types.MethodType: c.method,
        types.BuiltinFunctionType: c.builtin,
        c.PjitFunction: c.pjit,
        # K-user-module, K-library-code
        types.ModuleType: mod.module,
        # K-treedef, K-jaxpr
        jax.tree_util.PyTreeDef: _treedef,
        JAXPR: _jaxpr,
        CLOSED_JAXPR: _jaxpr,
        # K-array-top, K-array-reached
        np.ndarray: arr.ndarray,
        # K-mutable (`sys.modules`: K-impure-library)
        list: mut.mutable,
        dict: lmut.dict_,
        set: mut.mutable,
        bytearray: mut.mutable,
        # K-mapping-proxy
        types.MappingProxyType: mut.mapping_proxy,
        # K-module-attrs: JAX's configuration, however it is reached (`from jax import config`)
        type(jax.config): lmut.jax_config,
        # K-library-code: a slot's or a C attribute's descriptor is part of its class
        types.MemberDescriptorType: v.slot_descriptor,
        types.GetSetDescriptorType: v.slot_descriptor,
        # K-descriptor
        property: cl.descriptor,
        classmethod: cl.descriptor,
        staticmethod: cl.descriptor,
        # K-decimal, K-fraction, K-datetime, K-path, K-pattern, K-uuid, K-signature
        decimal.Decimal: lib.decimal_,
        fractions.Fraction: lib.fraction,
        datetime.datetime: lib.datetime_,
        datetime.date: lib.date_,
        datetime.time: lib.time_,
        datetime.timedelta: lib.timedelta_,
        datetime.timezone: lib.timezone_,
        zoneinfo.ZoneInfo: lib.zoneinfo_,
        pathlib.PurePosixPath: lib.path,
        pathlib.PureWindowsPath: lib.path,
        pathlib.PosixPath: lib.path,
        pathlib.WindowsPath: lib.path,
        re.Pattern: lib.pattern,
        uuid.UUID: lib.uuid_,
        inspect.Signature: lib.signature,
        inspect.Parameter: lib.parameter,
        # K-buffer
        memoryview: lmut.memoryview_,
        array.array: lmut.array_,
        mmap.mmap: lmut.mmap_,
        # K-weakref
        weakref.ProxyType: lmut.weak_proxy,
        weakref.CallableProxyType: lmut.weak_proxy,
    }
)

# K-module-attrs: JAX's configuration holders (`jax.enable_checks.value`, `with
# jax.log_compiles(True):`), by their value now.
for _holder in CONFIG_HOLDERS:
    if _holder is not type(jax.config):
        _EXACT[_holder] = lmut.jax_config_state

if LEGACY_MODULE_AUX is not None:
    # Equinox < 0.13.3: a module's node data is a `_FlattenedData` (a dataclass, not frozen, so
    # unhashable), made afresh per flatten: keyed by its fields, as the tuple newer Equinox gives
    # is keyed by its items. Otherwise a treedef holding it is a new key per flatten.
    _EXACT[LEGACY_MODULE_AUX] = v.frozen_dataclass


def _defines_eq(t: type) -> Any:
    """The `__eq__` that objects of `t` use: `"value"` where it compares fields (generated by
    `dataclasses`, or Equinox's), `"identity"` where it is `object`'s, else `"own"`."""
    if own_class(t) and dataclasses.is_dataclass(t):
        # eqxstable's own frozen dataclasses (the `filter_jit` wrapper and its node data) compute
        # with their fields alone, by design: keyed by them, as an `eqx.Module` is.
        return "value"
    for base in t.__mro__:
        f = base.__dict__.get("__eq__")
        if f is None:
            continue
        if base is object:
            return "identity"
        if issubclass(base, eqx.Module) and library_class(base):
            return "value"  # `eqx.Module.__eq__`: the fields, by `tree_equal`.
        params = base.__dict__.get("__dataclass_params__")
        if params is not None and params.eq and cl.generated(f):
            return "value"
        return "own"
    return "identity"


def _static_form(t: type) -> bool:
    # `eqxstable._module._static.Static`, told by a flag of its own class: the keys layer does
    # not import the module layer above it.
    return t.__dict__.get("eqxstable_static_form") is True


def _served_on_access(t: type) -> bool:
    # `unittest.mock`'s mocks make what they are asked for (a child mock per attribute, a class
    # per `MagicMock`): what one holds is not its state but what was asked of it so far, and
    # walking it asks more. (Not every library `__getattr__`: `jax.custom_jvp` forwards to the
    # function it wraps.) No mock exists before `unittest.mock` is imported.
    mock = sys.modules.get("unittest.mock")
    return mock is not None and issubclass(t, mock.NonCallableMock)


def _served(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    # `K-opaque`: itself on its own, a key equal to nothing for a reader; never walked.
    return unreadable(obj, ctx)


def _path_subclass(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    # `K-path`: a user's subclass of a concrete path (`class P(type(Path()))`): on its own, an
    # object with an `==` of its own (`K-own-eq`); reached by anything, a key equal to nothing,
    # as a concrete path is (its inherited methods read the file system).
    if ctx.depth:
        return impure_library(lib.FILE_SYSTEM, ctx)
    return cl.own_eq(obj, ctx, content_ok)


def resolve(t: type) -> Handler:
    """Chooses the handler for objects of exactly type `t`: the table's row for `t`."""
    if issubclass(t, PRIMITIVE):
        # K-primitive: keyed as its class says (JAX's own: `K-library-object`; a user's subclass
        # with an `==` of its own: `K-own-eq`), and by the rules JAX's tables hold for it.
        return prim.with_rules(_resolve(t))
    return _resolve(t)


def _resolve(t: type) -> Handler:
    exact = _EXACT.get(id(t))
    if exact is not None:
        return exact
    if getattr(t, "eqxstable_canonical_form", False) is True:
        return canonical_form  # K-canonical-form: a plain module's static list, dict, set, array
    if t is clo.closure_function_class():
        # K-closure-function: looked up here, as Equinox's module may be imported after this one
        # (and where Equinox moved the class, it has no row of its own: K-own-eq).
        return clo.closure_function
    if issubclass(t, type):
        return _class  # K-user-class, K-library-code
    if issubclass(t, types.ModuleType):
        return mod.module  # K-user-module, K-library-code: its class may serve names
    if issubclass(t, ft.partial):
        return c.partial  # K-partial
    if issubclass(t, enum.Enum):
        return v.enum_  # K-enum
    if issubclass(t, np.void):
        return lmut.void  # K-buffer
    if issubclass(t, np.generic) and not issubclass(t, np.object_):
        return v.numpy_scalar  # K-numpy-scalar
    if issubclass(t, np.dtype):
        return lib.dtype_  # K-dtype
    if issubclass(t, (jax.Array, Tracer)):
        # A tracer is not a `jax.Array` subclass: keyed as what it is, this very value of one
        # trace (never a walk of the live trace it belongs to).
        return v.jax_array  # K-jax-array
    if issubclass(t, np.ndarray):
        return arr.ndarray_subclass  # K-mutable: a subclass may add state of its own
    if issubclass(t, weakref.ref):
        return lmut.weak_ref  # K-weakref (`WeakMethod`, `KeyedRef` too)
    if issubclass(t, lmut.CTYPES):
        return lmut.ctypes_  # K-buffer
    if issubclass(t, (bool, int, float, complex, str, bytes)):
        return v.builtin_subclass  # K-builtin-subclass
    if issubclass(t, tuple):
        if _static_form(t):
            return v.static_form  # K-tuple: `StableModule`'s canonical static value
        return v.tuple_subclass  # K-tuple
    if issubclass(t, frozenset):
        return v.frozenset_  # K-tuple
    if issubclass(t, (list, dict, set, bytearray)):
        return mut.mutable  # K-mutable
    if id(t) in lib.JAX_VALUE_IDS:
        return lib.jax_value  # K-jax-value
    if id(t) in lib.KEY_PATH_ENTRY_IDS:
        return lib.key_path_entry  # K-key-path
    if issubclass(t, pathlib.Path):
        return _path_subclass  # K-path
    eq = _defines_eq(t)
    if (
        dataclasses.is_dataclass(t)
        and eq == "value"
        and (t.__dataclass_params__.frozen or issubclass(t, eqx.Module))  # pyright: ignore
    ):
        return v.frozen_dataclass  # K-frozen-dataclass
    if _served_on_access(t):
        return _served  # K-opaque
    has_hash = t.__hash__ is not None and t.__hash__ is not object.__hash__
    if has_hash and eq != "identity":
        # K-library-object (`jnp.multiply`, a `jnp.ufunc` held by its module), K-own-eq
        return c.library_hashable if library_class(t) else cl.own_eq
    if has_hash:
        return hash_without_eq  # K-hash-without-eq
    if library_class(t):
        return c.library_object  # K-library-object, K-library-container, K-opaque
    return mut.mutable  # K-mutable
