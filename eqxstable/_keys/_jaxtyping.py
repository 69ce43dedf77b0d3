"""The classes jaxtyping makes for its annotations (`K-jaxtyping-array`): `Float[Array, "a b"]`
is a class made at run time, one per subscript (never cached: `Float[Array, "a b"] is
Float[Array, "a b"]` is False), by jaxtyping's `_make_array`, with a namespace holding only what
the subscript fixed. It is not a library class by `_origin` (no method of its own body, and its
jaxtyping module holds it under no name), so it was walked as a user's class: every entry, its
metaclass, its registries, for each annotation of every class and function keyed.

Recognised by construction only (`made_by_jaxtyping`): its metaclass is jaxtyping's own
`_MetaAbstractArray` (or, jaxtyping < 0.3, the subclass of it that jaxtyping makes per array
metaclass, a library class), its bases exactly what `_make_array` gives (`(AbstractArray,)`, or
before 0.3 `(array_type, AbstractArray)`), and its namespace holds only the names `_make_array`
writes (`_NAMES`). Nothing the user wrote can live in it but the values of those names, which
are keyed as what they are: the dimension string and the `dims` it was parsed into (jaxtyping's
frozen records of names, sizes and flags, and its singletons), the dtype strings or patterns,
the array type (a user's class keyed as one), the dtype class, and the flag `make_transparent`
sets. A class the user wrote on jaxtyping's bases with anything else (a method, `__new__`) is a
user class, walked as one."""

import abc
import sys
import types
from typing import Any

from ._classes import _abc_registry
from ._context import compound, Ctx, key
from ._origin import library_class
from ._watch import size


# The names `_make_array` writes into the namespace it makes (jaxtyping 0.2.33 to 0.3.11), and
# those `type` and `ABCMeta` add: `__module__` (set afterwards to "jaxtyping" or "builtins"),
# `__doc__` (`None`); before 0.3, where the class derives from the array type, `__dict__` and
# `__weakref__` (the descriptors `type` makes for instances it has none of: `AbstractArray`
# cannot be instantiated), and `ABCMeta`'s `__abstractmethods__` and `_abc_impl`.
# `_skip_instancecheck` is set on the class by `make_transparent` (jaxtyping's decorator, for a
# generator's return annotation).
_NAMES = frozenset(
    {
        "array_type",
        "dtype",
        "dtypes",
        "dims",
        "index_variadic",
        "dim_str",
        "_skip_instancecheck",
        "__module__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__abstractmethods__",
        "_abc_impl",
    }
)

# Left out of the key: the descriptors `type` makes for the instances' `__dict__` and weak
# references (one new object per class, no code or data of anyone's; `type` refuses to rebind
# them), and `abc`'s bookkeeping, whose registry is keyed (`_abc_registry`).
_SKIPPED = frozenset({"__dict__", "__weakref__", "_abc_impl"})


# jaxtyping's two classes, once found (`_jaxtyping_bases`).
_found: list = []


def _jaxtyping_bases() -> tuple[Any, Any] | None:
    """jaxtyping's `_MetaAbstractArray` and `AbstractArray`, where jaxtyping is imported (it is
    read from `sys.modules`, not imported here) and still has them where 0.2.33 to 0.3.11 do."""
    if _found:
        return _found[0]
    module = sys.modules.get("jaxtyping._array_types")
    meta = getattr(module, "_MetaAbstractArray", None)
    base = getattr(module, "AbstractArray", None)
    if not isinstance(meta, type) or not isinstance(base, type) or not library_class(meta):
        return None
    _found.append((meta, base))
    return meta, base


def made_by_jaxtyping(cls: type) -> bool:
    """Whether `cls` is a class that jaxtyping's `_make_array` made for an annotation. Decided
    by identity and by the names of its namespace, never by its `==` (jaxtyping < 0.3 compares
    these classes by their contents) nor by its `__module__`."""
    found = _jaxtyping_bases()
    if found is None:
        return False
    meta, base = found
    t = type(cls)
    if t is not meta:
        # jaxtyping < 0.3: a subclass of `_MetaAbstractArray` that jaxtyping makes per array
        # metaclass (`_make_metaclass`), with `_MetaAbstractArray` next in its MRO.
        # Its other bases come from the array type's metaclass: all a library's, or a user's
        # metaclass could serve `cls.__dict__` and `cls.__bases__` itself (then: a user class).
        mro: tuple = t.__mro__  # pyright: ignore[reportAssignmentType]
        if len(mro) < 2 or mro[1] is not meta or not all(library_class(m) for m in mro):
            return False
    d = cls.__dict__
    bases = cls.__bases__
    if cls is base or bases[-1] is not base:
        return False
    if len(bases) == 2:
        if bases[0] is not d.get("array_type", base):
            return False
    elif len(bases) != 1:
        return False
    return all(type(k) is str and k in _NAMES for k in d)


@compound
def annotation_class(cls: type, ctx: Ctx, content_ok: bool) -> Any:
    """`K-jaxtyping-array`: a class jaxtyping made for an annotation (`made_by_jaxtyping`), by
    what it holds, never walked as a user's class: its metaclass (a library class, keyed as
    one), names, and each entry of its namespace keyed as what it is, by name (the array type, a
    user's class too, as a class; the dtype strings, the dims, the dtype class). Not its
    identity: a rebuilt function annotated `x: Float[Array, "n"]` holds a new class equal in
    everything a trace reads (jaxtyping's `isinstance` reads these entries, and nothing can
    instantiate it); its bases are fixed by its entries (checked by `made_by_jaxtyping`, and
    watched). Its namespace is watched (`_state`): `make_transparent` sets an entry on it."""
    d = cls.__dict__
    ctx.states.append((cls, _names, _names(cls)))
    ctx.states.append((cls, _state, _state(cls)))
    items = tuple([(k, key(v, ctx, False)) for k, v in d.items() if k not in _SKIPPED])
    registry = _abc_registry(cls, ctx) if "_abc_impl" in d else ()
    return (
        "jaxtyping-array",
        key(type(cls), ctx, False),
        len(cls.__bases__),
        cls.__name__,
        cls.__qualname__,
        items,
        registry,
    )


def _names(cls: type) -> tuple:
    # The names of its namespace, in order, apart from what they hold: all `str`s (and a size),
    # which the memo's watch keeps as they are and checks in C (`_watch._weak_items`); beside
    # them, a state of classes held weakly checks each item in Python.
    d = cls.__dict__
    return (size(len(d)), *d.keys())


def _state(cls: type) -> tuple:
    # Its bases, names, metaclass and what each entry holds (compared with `is`); `abc`'s cache
    # token where it is an `abc` class (a `register` on it is keyed above).
    d = cls.__dict__
    token = (size(abc.get_cache_token()),) if "_abc_impl" in d else ()  # pyright: ignore
    values = [_OWN_SLOT if _own_slot(cls, k, v) else v for k, v in d.items()]
    return (cls.__bases__, cls.__name__, cls.__qualname__, type(cls), *token, *values)


# What stands in the state for the class's own `__dict__` and `__weakref__` descriptors (before
# jaxtyping 0.3): each holds its class strongly, so a state holding it would keep an annotation
# class alive for good. `type` makes one per name and never another: rebound, the entry is
# another object in the state.
_OWN_SLOT = object()
_SLOT_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType)


def _own_slot(cls: type, name: str, v: Any) -> bool:
    return type(v) in _SLOT_DESCRIPTORS and v.__objclass__ is cls and v.__name__ == name
