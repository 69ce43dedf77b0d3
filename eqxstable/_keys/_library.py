"""Keys of the immutable values of library classes on the allowlist (`Decimal`, `Fraction`,
`datetime`, paths, patterns, `UUID`, signatures, dtypes, JAX's descriptions of arrays and its
key-path entries), keyed by their whole state. Library objects that can change (buffers, weak
references, library containers) are `_library_mutable.py`; the function an Equinox `_Closure`
rebuilds at each call, `_closure_function.py`.

Each handler here is a row of the table in `README.md` (its id is given in the docstring).
"""

import decimal
import pathlib
from typing import Any

import numpy as np

from . import _dtypes
from ._context import compound, Ctx, key
from ._dtypes import dtype_key
from ._fallbacks import identity
from ._per_class import type_ids
from ._state import impure_library, unreadable
from ._types import Equal, Namespace
from ._watch import size


#
# Values on the allowlist: immutable, and all of their state is read here.
#


def decimal_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-decimal`: sign, digits and exponent (`Decimal('1.00')` and `Decimal('1.0')` differ;
    NaN, sNaN and infinities by their marker), and the settings of the thread's decimal context,
    watched: arithmetic on it in a trace reads them (`getcontext().prec = 2` rounds `1/3`)."""
    context = ctx.watch_once(decimal, decimal_context)
    if obj.is_nan():
        # A NaN (quiet or signalling, any payload) is unequal to itself, as a float's: never
        # substituted (`_values._no_nan_substitute`). Asked by `is_nan`, not `==`, which
        # signals on an sNaN (it raises, or sets the flag in the user's context).
        ctx.own_eq = True
    return (type(obj), obj.as_tuple(), context)


def decimal_context(_: Any) -> tuple:
    """What of the thread's decimal context an operation's result depends on: precision,
    rounding, exponent limits, `capitals`, `clamp` and which signals trap (never its `flags`,
    which operations set). Each as one object per value, for a state compared with `is`."""
    c = decimal.getcontext()
    ints = (c.prec, c.Emin, c.Emax, c.capitals, c.clamp)
    return (*(size(n) if n >= 0 else _negative(n) for n in ints), c.rounding, *c.traps.values())


_negatives: dict[int, int] = {}


def _negative(n: int) -> int:
    return _negatives.setdefault(n, n)


def fraction(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-fraction`: numerator and denominator (in lowest terms), where both are exactly `int`.
    `Fraction` keeps a rational's own integer type (`Fraction(np.int64(3))` holds NumPy ints,
    which wrap and promote otherwise: attack 15b-02): any other, this very object."""
    num, den = obj.numerator, obj.denominator
    if type(num) is not int or type(den) is not int:
        return identity(obj, ctx)
    return (type(obj), num, den)


@compound
def datetime_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: every field, `fold` and the `tzinfo` (keyed as what it is)."""
    return (
        type(obj),
        obj.year,
        obj.month,
        obj.day,
        obj.hour,
        obj.minute,
        obj.second,
        obj.microsecond,
        obj.fold,
        key(obj.tzinfo, ctx, False),
    )


def date_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: year, month, day."""
    return (type(obj), obj.year, obj.month, obj.day)


@compound
def time_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: every field, `fold` and the `tzinfo`."""
    fields = (obj.hour, obj.minute, obj.second, obj.microsecond, obj.fold)
    return (type(obj), fields, key(obj.tzinfo, ctx, False))


def timedelta_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: days, seconds, microseconds (the normalised form)."""
    return (type(obj), obj.days, obj.seconds, obj.microseconds)


def timezone_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: the offset and the name (`%Z` prints it), and whether that name was given:
    `timezone(timedelta(0), "UTC")` names itself `UTC` as `timezone.utc` does, but its `repr`
    and pickle hold the name. `__getinitargs__` is what it is rebuilt from: the offset alone, or
    the offset and the name as given."""
    given = tuple([key(name, ctx, False) for name in obj.__getinitargs__()[1:]])
    offset = timedelta_(obj.utcoffset(None), ctx, False)
    return (type(obj), offset, obj.tzname(None), given)


def zoneinfo_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-datetime`: a `ZoneInfo` is immutable; one object per zone (the class's own cache), so
    this very object."""
    return ("zoneinfo", Namespace(obj))


def path(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-path`: exact type and the path as text. A pure path is immutable and computes with its
    text alone: so keyed wherever it is met. A concrete path (`PosixPath`, `WindowsPath`) holds
    nothing but its text too, yet its methods read the file system, which no key sees: on its
    own (`stable_key(p)`, a static argument that is the path itself, which Equinox compares by
    `==`) it is its text; reached by anything (a function's default, cell or global, a
    partial's argument, a container, an object's attribute, node data) it is a key equal to
    nothing (`K-impure-library`), so that its reader is never shared, however it holds it, as
    under `equinox.filter_jit`. One rule, by depth as for `K-opaque`: no handler's list of
    places to forget, and no memo to mix the two (a path is no `compound` object, and every
    object holding one is keyed with it as reached, wherever that object is met)."""
    t = type(obj)
    if ctx.depth and (t is pathlib.PosixPath or t is pathlib.WindowsPath):
        return impure_library(FILE_SYSTEM, ctx)
    return (t, str(obj))


# What a concrete path's methods read, named in its reader's key (the jit layer's miss shows it).
FILE_SYSTEM = "pathlib.Path (the file system)"


@compound
def pattern(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-pattern`: the pattern (`str` or `bytes`) and the flags it was compiled with."""
    return (type(obj), key(obj.pattern, ctx, False), obj.flags)


@compound
def uuid_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-uuid`: the 128-bit value and `is_safe`. `UUID(int=...)` keeps the integer it is given
    as it is (`np.int64(5)`, `True`: attack 15b-04): other than exactly `int`, this very object."""
    if type(obj.int) is not int:
        return identity(obj, ctx)
    return (type(obj), obj.int, key(obj.is_safe, ctx, False))


@compound
def signature(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-signature`: each parameter and the return annotation (`jax.jit` keeps the signature
    of the function it wraps)."""
    params = tuple([key(p, ctx, False) for p in obj.parameters.values()])
    return (type(obj), params, key(obj.return_annotation, ctx, False))


@compound
def parameter(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-signature`: name, kind, default and annotation."""
    parts = (obj.name, obj.kind, obj.default, obj.annotation)
    return (type(obj), tuple([key(x, ctx, False) for x in parts]))


@compound
def dtype_(obj: np.dtype, ctx: Ctx, content_ok: bool) -> Any:
    """`K-dtype`: everything code can read of it (`_dtypes.describe`), never its `==` (which
    calls a packed and an aligned struct equal); what is not NumPy's own (metadata, titles,
    `na_object`) keyed as what it is. A structured dtype's `names`, and those of the structured
    dtypes inside it, can be assigned in place: watched; such a dtype, or one holding objects
    (metadata), is never substituted."""
    if _dtypes.fixed(obj):
        return (np.dtype, dtype_key(obj))
    try:
        described = _dtypes.describe(obj, lambda x: key(x, ctx, False))
    except _dtypes.Unknown:
        # A dtype class NumPy does not make itself (a user's DType): nothing can be read of it.
        return unreadable(obj, ctx)
    ctx.own_eq = True
    ctx.states.append((obj, _dtypes.all_names, _dtypes.all_names(obj)))
    return (np.dtype, described)


def _jax_values() -> tuple[type, ...]:
    import jax
    import jax.core

    names = [
        (jax, "ShapeDtypeStruct"),
        (jax.sharding, "NamedSharding"),
        (jax.sharding, "AbstractMesh"),
        (jax.core, "ShapedArray"),
    ]
    return tuple(t for m, n in names if isinstance(t := getattr(m, n, None), type))


# JAX's immutable descriptions of arrays (what a closure-converted jaxpr or `eval_shape` holds):
# JAX itself keys its caches by their `==`, which is exact and covers their whole state.
JAX_VALUES = _jax_values()
JAX_VALUE_IDS = type_ids(JAX_VALUES)
# Those with a `shape` tuple of dimensions (an `AbstractMesh`'s `shape` is its axes).
_SHAPED = tuple(t for t in JAX_VALUES if t.__name__ in ("ShapeDtypeStruct", "ShapedArray"))


def jax_value(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-jax-value`: JAX's `==` within the exact type, substituted. A shape JAX keeps as given
    and compares with Python's `==` (a `ShapeDtypeStruct`'s: `(np.int64(3),)` equals `(3,)`,
    yet `x * s.shape[0]` promotes otherwise: attack 15b-01) counts only when every dimension is
    exactly `int` and a NumPy dtype is a plain one (`_dtypes.fixed`); else this very object."""
    if type(obj) in _SHAPED:
        dtype = obj.dtype
        if not all(type(d) is int for d in obj.shape) or (
            # A dtype with metadata or fields: NumPy's `==` ignores the metadata.
            isinstance(dtype, np.dtype) and not _dtypes.fixed(dtype)
        ):
            return identity(obj, ctx)
    return Equal(obj, hash(obj))


def _key_path_entries() -> dict[type, str]:
    import jax.tree_util as jtu

    names = {"DictKey": "key", "SequenceKey": "idx", "GetAttrKey": "name"}
    names["FlattenedIndexKey"] = "key"
    return {t: f for n, f in names.items() if isinstance(t := getattr(jtu, n, None), type)}


# JAX's key-path entries (C++ classes on recent jaxlib) and the one field each holds. Their own
# `==` compares that field with Python's `==`, so `DictKey(1)`, `DictKey(True)` and
# `DictKey(1.0)` are equal: they are keyed by their exact type and the field keyed as what it is.
KEY_PATH_ENTRIES = _key_path_entries()
KEY_PATH_ENTRY_IDS = type_ids(KEY_PATH_ENTRIES)


@compound
def key_path_entry(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-key-path`: `DictKey`, `SequenceKey`, `GetAttrKey`, `FlattenedIndexKey` by their exact
    type and their one field, keyed type-exactly (a user object held as a dict key: as what it
    is). The field cannot be reassigned (a read-only property of the C++ class)."""
    return (type(obj), key(getattr(obj, KEY_PATH_ENTRIES[type(obj)]), ctx, False))
