"""Keys of values: numbers and strings by exact type and bits, immutable containers by their
items, enum members, frozen dataclasses by their fields, and JAX arrays by identity. What an
object holds besides is keyed by `_state.py`; objects that can change in place by `_mutable.py`,
NumPy arrays by `_arrays.py`, classes and objects with an `==` of their own by `_classes.py`, and
modules by `_modules.py`."""

import dataclasses
import struct
from typing import Any

import numpy as np

from ._budget import past_budget, run_out
from ._context import compound, Ctx, frozen_part, key
from ._dtypes import dtype_key
from ._fallbacks import identity, TOO_MANY
from ._frozen import frozen_scalars
from ._origin import library_class, own_class
from ._per_class import per_class
from ._records import recall_records, records_part
from ._scalars import scalar_run
from ._state import (
    added_state,
    class_part,
    dict_state,
    extra_attrs,
    hidden_state,
    holds_data,
    slots_of,
    takes_data,
    unreadable,
)
from ._types import Identity, Namespace, proven_equal
from ._watch import MISSING


_pack_double = struct.Struct("<d").pack


def value(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    return (type(obj), obj)


def float_(obj: float, ctx: Ctx, content_ok: bool) -> Any:
    # Bits, not `==`: `0.0` and `-0.0` differ, and a NaN equals a NaN with the same bits.
    # A NaN is never substituted (`_no_nan_substitute`; inline: a float's `!=` cannot raise).
    if obj != obj:
        ctx.own_eq = True
    return (float, _pack_double(obj))


def _no_nan_substitute(obj: Any, ctx: Ctx) -> None:
    # A value unequal to itself (a NaN, NaT, an `ml_dtypes` NaN: unequal to every other such
    # object, and a container compares its items by `is` first), or one whose `==` raises, is
    # never substituted: `intern` handing out another such object, or a container of one, would
    # change what `==` answers against the user's own (`[nan_a] == [nan_b]` is False). Keyed by
    # its bits still (a program is shared), only never handed out for another.
    if not self_equal(obj):
        ctx.own_eq = True


def self_equal(obj: Any) -> bool:
    """Whether `obj == obj` is true (a NumPy boolean counts): false for any NaN or NaT, and for
    a value whose `==` raises or answers something that is not a boolean."""
    return proven_equal(obj, obj)


def complex_(obj: complex, ctx: Ctx, content_ok: bool) -> Any:
    if obj != obj:
        ctx.own_eq = True  # As `float_`.
    return (complex, _pack_double(obj.real), _pack_double(obj.imag))


def numpy_scalar(obj: np.generic, ctx: Ctx, content_ok: bool) -> Any:
    t = type(obj)
    # Whatever its dtype's kind: NaN and NaT, and the NaNs of dtypes NumPy does not make
    # (`ml_dtypes.bfloat16`, `float8_*`: kind "V"), are unequal to themselves (`float_`).
    _no_nan_substitute(obj, ctx)
    if library_class(t):
        return (t, dtype_key(obj.dtype), obj.tobytes())
    # A user's subclass: its methods run in the trace, its attributes are read. Its value as
    # NumPy's own methods read it (the subclass may override `tobytes` or `dtype`).
    data = (dtype_key(_GENERIC_DTYPE(obj)), np.generic.tobytes(obj))
    holds_data(obj, ctx)
    takes_data(obj, ctx)
    return (class_part(t, ctx), *data, added_state(obj, ctx))


_GENERIC_DTYPE = np.generic.__dict__["dtype"].__get__


def range_(obj: range, ctx: Ctx, content_ok: bool) -> Any:
    # Not `range.__eq__`, which calls all empty ranges equal.
    return (range, obj.start, obj.stop, obj.step)


def slice_(obj: slice, ctx: Ctx, content_ok: bool) -> Any:
    return (slice, key(obj.start, ctx, False), key(obj.stop, ctx, False), key(obj.step, ctx, False))


@compound
def enum_(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    # By value, not name: `IntFlag` pseudo-members such as `Perm(0)` and `Perm(8)` have no name.
    # `__objclass__` is the member's own class, named already.
    # The class as any class is keyed: a user's enum's namespace is watched (a class attribute
    # assigned later is seen), a library's is a constant.
    attrs = extra_attrs(obj, ctx, skip=("__objclass__",))
    return ("enum", key(type(obj), ctx, False), key(obj._value_, ctx, False), attrs)


def constant(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """A library module or class, a builtin: one object for the whole process."""
    return Namespace(obj)


def slot_descriptor(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """A slot's or a C attribute's descriptor (`C.__dict__["__weakref__"]`, a `__slots__` entry's
    member): part of its class, one per name, made with it and never changed. Keyed by its class
    (held weakly) and name, not by the descriptor, which holds its class strongly and supports no
    weak reference: a key holding it would keep a class made at run time alive for ever."""
    return (type(obj), obj.__name__, Namespace(obj.__objclass__))


# Shorter tuples are walked: the budget does not concern them.
_FEW = 256


@compound
def tuple_(obj: tuple, ctx: Ctx, content_ok: bool) -> Any:
    fast = scalar_run(obj, ctx)
    if fast is not None:
        return (tuple, fast)
    frozen = records_part(obj, ctx) or frozen_part(obj, ctx)
    if frozen is not None:
        return frozen
    if len(obj) > _FEW:
        remembered = recall_records(obj, ctx, content_ok)
        if remembered is not None:
            return remembered
    if len(obj) > _FEW and past_budget(obj, ctx) and frozen_scalars(obj):
        # Walking it would run out of the budget, and `top` would start over to key it by its
        # identity (`K-too-deep`): so keyed now. Nothing in it can change.
        ctx.identity = True
        return (TOO_MANY, Identity(obj))
    if len(obj) > _FEW:
        run_out(obj, ctx)
    return (tuple, tuple([key(x, ctx, content_ok) for x in obj]))


@compound
def tuple_subclass(obj: tuple, ctx: Ctx, content_ok: bool) -> Any:
    # NamedTuples and other subclasses: the exact class, the items and any instance attributes,
    # whatever `__eq__` the class defines. Only NamedTuples are rebuilt with read-only arrays.
    # The items in its C storage, through `tuple`'s own iterator: a subclass's `__iter__` may
    # show something else (`Pt(1, 2)` iterating as `(1,)`), while its fields and its methods
    # read the storage. Its class, keyed, covers whatever the subclass overrides.
    content_ok = content_ok and hasattr(obj, "_make")
    items = tuple([key(x, ctx, content_ok) for x in tuple.__iter__(obj)])
    holds_data(obj, ctx)
    takes_data(obj, ctx)
    return (class_part(type(obj), ctx), items, extra_attrs(obj, ctx))


# Its instances may be records of a tuple keyed by identity past the budget (`_records.py`).
tuple_subclass.tuple_record = True  # pyright: ignore[reportFunctionMemberAccess]


@compound
def static_form(obj: tuple, ctx: Ctx, content_ok: bool) -> Any:
    """A `StableModule`'s canonical static value (`eqxstable._static.Static`, a tuple of the
    value, whether it holds an array, its table parts and its anchor): this very canonical form
    (its anchor's identity, as before) and its value, keyed as any value is. The table parts are
    derived from the value when the form is made and cannot change: walking them (a pair per
    leaf) cost a 100,000-word vocabulary the object budget, and so a trace on every call."""
    value, has_array, _, anchor = obj
    ctx.identity = True
    return (type(obj), Identity(anchor), key(value, ctx, False), has_array)


@compound
def frozenset_(obj: frozenset, ctx: Ctx, content_ok: bool) -> Any:
    # In iteration order: equal frozensets can iterate differently, and code may loop over one.
    frozen = records_part(obj, ctx) or frozen_part(obj, ctx)
    if frozen is not None:
        return frozen
    # A subclass's `__iter__` may show something else than what `in` and `len` read: the
    # items in its C storage, through `frozenset`'s own iterator.
    items = tuple([key(x, ctx, content_ok) for x in frozenset.__iter__(obj)])
    t = type(obj)
    if t is frozenset:
        return (t, items)
    # A subclass: its methods run in the trace, and it may hold attributes and slots.
    holds_data(obj, ctx)
    takes_data(obj, ctx)
    return (class_part(t, ctx), items, added_state(obj, ctx))


@compound
def builtin_subclass(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """A subclass of `int`, `float`, `complex`, `str` or `bytes`: its exact type, the builtin
    value (never the subclass's own `==`) and its attributes."""
    # Its class as any class is keyed (a user's: its namespace, watched), and its slots too.
    state = added_state(obj, ctx)
    holds_data(obj, ctx)
    takes_data(obj, ctx)
    t = type(obj)
    for base, read in _BUILTIN_VALUE:
        if issubclass(t, base):
            return (key(t, ctx, False), key(read(obj), ctx, False), state)
    return identity(obj, ctx)


# The builtin value a subclass's instance holds, read from its C storage through the base's own
# slots: `int(obj)` or `str(obj)` would call the subclass's `__int__` or `__str__`, which may say
# anything (`class Act(str): __str__ = str.upper` holds "relu" and computes with it, yet shows
# "RELU"). Each gives a new object of exactly the base type. By `issubclass` of the type, never
# `isinstance`, which asks the object's `__class__`.
_COMPLEX_REAL = complex.__dict__["real"]
_COMPLEX_IMAG = complex.__dict__["imag"]
_BUILTIN_VALUE: tuple = (
    (int, int.__int__),  # `bool` cannot be subclassed; an `int` subclass's is copied exactly.
    (float, float.__float__),
    (complex, lambda z: complex(_COMPLEX_REAL.__get__(z), _COMPLEX_IMAG.__get__(z))),
    (str, str.__str__),
    (bytes, lambda b: bytes.__getitem__(b, slice(None))),
)


@compound
def frozen_dataclass(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """A frozen dataclass or an Equinox module: its exact class and its fields by value.

    A dict held by a library's module is the module's own (the `keywords` of `equinox.Partial`):
    keyed by its contents and watched. A user's module could share its dicts and lists with the
    caller, so they are keyed as usual (identity and contents)."""
    t = type(obj)
    if hidden_state(t) and not library_class(t):
        # A user's class whose C base holds state its fields do not show (a `deque`'s items, an
        # `array.array`'s buffer): the generated `==` compares the fields alone, so two equal
        # ones may compute differently. `K-opaque`, as `K-own-eq` makes such a class.
        return unreadable(obj, ctx)
    values = []
    owned = _owns_dicts(t)
    d = getattr(obj, "__dict__", None) or {}
    for name in field_names(t):
        raw = d.get(name, MISSING)
        v = getattr(obj, name, MISSING)
        if getattr(type(raw), "eqxstable_static_form", False) and v is not raw[0]:
            # A `StableModule`'s static list or dict reads back as a plain copy: it is keyed by
            # the canonical form the instance holds instead.
            v = raw
        if owned and type(v) is dict:
            if v or not name.startswith("_"):
                # Its own dict (`equinox.Partial`'s keywords), which can still change in place,
                # a public empty one too (`p.keywords["k"] = 9.0`): an equal module elsewhere
                # reads another one, so never substituted. A private field's empty dict
                # (`filter_grad`'s options) is the library's, which never changes it.
                ctx.own_eq = True
            ctx.states.append((v, dict_state, dict_state(v)))
            values.append((name, dict, tuple((k, key(x, ctx, False)) for k, x in v.items())))
        else:
            values.append((name, key(v, ctx, False)))
    # A subclass may declare slots that are not fields (`class B(A): __slots__ = ("extra",)`).
    # eqxstable's own compute with their fields alone, by design (a wrapper's counters).
    skip = field_names(t) + slots_of(t) if own_class(t) else field_names(t)
    holds_data(obj, ctx, skip)
    return (key(t, ctx, False), tuple(values), added_state(obj, ctx, skip=skip))


# Its instances may be records of a tuple keyed by identity past the budget (`_records.py`).
frozen_dataclass.frozen_record = True  # pyright: ignore[reportFunctionMemberAccess]


def _owns_dicts(t: type) -> bool:
    # A library's module (`equinox.Partial`, the wrapper `equinox.filter_vmap` returns) builds
    # its dicts from `**kwargs` and never changes them: installed packages are constants.
    return library_class(t)


@per_class
def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def jax_array(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    # Immutable, and too costly to key by contents: this very array.
    ctx.identity = True
    return Identity(obj)
