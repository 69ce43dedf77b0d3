"""Keys of classes and of what classes make: a user's class by everything in its namespace
(`K-user-class`, an enum's members too), an object compared by its class's own `==` (`K-own-eq`),
and the descriptors a class holds (`K-descriptor`)."""

import abc
import enum
import operator
import types
from itertools import chain, islice
from typing import Any

import equinox as eqx

from ._class_entries import entry, generated as generated, SKIPPED
from ._context import compound, Ctx, key
from ._fallbacks import identity
from ._origin import library_class
from ._registries import library_class_data, virtual_bases
from ._state import added_state, extra_attrs, hidden_state, holds_data, unreadable
from ._structure import _registered, registry_entry
from ._types import Equal, Namespace
from ._watch import size


def _skipped(c: type, k: str, v: Any) -> bool:
    # `SKIPPED`'s `__dict__` is `type`'s descriptor for the instances' `__dict__`. A class body
    # may bind the name to anything else (`__dict__ = {}`: every `obj.__dict__` is then that one
    # dict, which code reads and writes): that is an entry like any other.
    return k in SKIPPED and type(v) is types.GetSetDescriptorType and v.__objclass__ is c


@compound
def descriptor(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`property`, `classmethod`, `staticmethod`: the functions they run (which cannot be
    reassigned), keyed as functions, so that a property reading a global is followed. A
    `classmethod` or `staticmethod` also has a `__dict__` (Python 3.10+: what it copies from the
    function, and whatever a decorator or the program stores there, `C.__dict__["s"].scale`),
    keyed and watched as any object's attributes; holding data of its own, it is never
    substituted (`_state.holds_data`: its twin holds another dict)."""
    if type(obj) is property:
        return (property, tuple([key(f, ctx, False) for f in (obj.fget, obj.fset, obj.fdel)]))
    holds_data(obj, ctx)
    return (type(obj), (key(obj.__func__, ctx, False),), extra_attrs(obj, ctx))


@compound
def own_eq(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """An object whose class defines its own `__eq__` and `__hash__` and is not on the allowlist
    (a user's class, a library's value class not known here): compared with its own `==`, within
    its exact type, as Equinox compares static values, and never substituted by `intern` (two
    equal objects may each hold lists of their own). Never keyed by a guessed state
    (`__reduce_ex__`, `__getstate__`): its `==` must hold, and, as a further condition that can
    only ever split keys, so must every attribute Python can see (by the usual rules: a list by
    identity), watched; an `==` that calls everything equal cannot then share a program between
    two objects that compute differently."""
    try:
        obj_hash = hash(obj)
    except Exception:
        return identity(obj, ctx)
    t = type(obj)
    if hidden_state(t) and not library_class(t):
        # A user's class whose C base holds state that neither the user's `==` nor the
        # attributes show (an `array.array`'s buffer, a `random.Random`'s generator, a `deque`'s
        # items, a `StringIO`'s text): two equal objects may compute differently, so it is
        # `K-opaque`, as its base is. A library's own value class (`types.GenericAlias`) keeps
        # its `==`, written for its C state.
        return unreadable(obj, ctx)
    ctx.own_eq = True
    # A typing form (`int | float`, `Union[...]`, `Literal[...]`) compares its arguments as a
    # set, though `get_args` and iteration give them in order: they are keyed in order too.
    args = getattr(obj, "__args__", None) if library_class(t) else None
    order = key(args, ctx, False) if type(args) is tuple else None
    return ("eq", key(t, ctx, False), Equal(obj, obj_hash), added_state(obj, ctx), order)


@compound
def user_class(cls: type, ctx: Ctx, content_ok: bool) -> Any:
    """A class defined in the user's code: its identity and everything in its namespace (and
    in that of its user base classes), so that assigning a class attribute is seen."""
    out = []
    # Any two equal keys of a class name this very class (`Namespace`), so they read the very
    # same namespace: an object in it that `intern` may not substitute (a typing form in its
    # `__annotations__`, compared by its own `==`) is the same object for both readers, and does
    # not stop `intern` from substituting what reads the class (as for `_registered_key`).
    own_eq = ctx.own_eq
    library_data = ()
    for c in cls.__mro__:
        if c is object:
            continue
        if library_class(c):
            # A library base: its code is constant, its plain class attributes are data
            # (`K-library-code`), read through this class (`Enc.item_separator`).
            library_data = library_data or library_class_data(c, ctx)
            continue
        d = c.__dict__
        ctx.states.append((c, _class_state, _class_state(c)))
        # Every entry of its namespace is keyed as what it is, whatever its name (`entry`):
        # dunder and `_sunder_` names are data and code like any other (`__registry__ = {...}`
        # by contents, watched; `__class_getitem__`, an enum's `_missing_`, a dunder property
        # by the functions they run; `__annotations__` by contents). Only `SKIPPED` is left out.
        items = tuple([(k, entry(c, k, v, ctx)) for k, v in d.items() if not _skipped(c, k, v)])
        registry = _abc_registry(c, ctx) if "_abc_impl" in d else ()
        out.append((Namespace(c), items, _members(c, ctx), registry))
    ctx.own_eq = own_eq
    # What code reads of a class beyond its namespace: its names (`type(x).__name__`), and its
    # metaclass, whose attributes its instances' class serves (`C.SCALE` from `Meta.SCALE`).
    meta = key(type(cls), ctx, False)
    # The flatten and unflatten registered for it with JAX run wherever one of its instances is
    # flattened or rebuilt (`jax.tree.leaves(box)`, `tree_unflatten(treedef, leaves)`): not in
    # its namespace, yet keyed with it, so the globals they read are followed (`_class_state`
    # holds the registry's entry, so a registration made later is seen). Not an `eqx.Module`'s:
    # Equinox registers every one itself, with code it generates from the fields (keyed with
    # the class), which is library code and constant; keying it cost a walk of its annotations
    # for every module keyed.
    node = (
        ()
        if _IS_SUBTYPE(eqx.Module, cls)
        else tuple(_registered_key(f, ctx) for f in _registered(cls))
    )
    # The `abc` classes naming it (or a class of its MRO) as a virtual subclass: a library's
    # (`numbers.Real.register(MyScalar)`) changes what `isinstance(s, numbers.Real)` answers in
    # a trace, and nothing of the class shows it (`_registries.virtual_bases`, token watched).
    virtual = virtual_bases(cls, ctx)
    return (
        "class",
        Namespace(cls),
        cls.__name__,
        cls.__qualname__,
        meta,
        tuple(out),
        node,
        virtual,
        library_data,
    )


# Whether a class has another in its MRO, by identity: `issubclass` asks `abc`, whose caches hash
# the class with its metaclass's `__hash__` (and compare with its `==`).
_IS_SUBTYPE = type.__subclasscheck__


def _registered_key(f: Any, ctx: Ctx) -> Any:
    """A function registered with JAX for a class, keyed as what it is. Two equal keys of the
    class name this very class, so they read this very function: data it owns (Equinox's
    generated flatten keeps its `__source__`) is the same object for both, and does not stop
    `intern` from substituting what holds the class (as for a function's annotations)."""
    own_eq = ctx.own_eq
    part = key(f, ctx, False)
    ctx.own_eq = own_eq
    return part


def _abc_registry(c: type, ctx: Ctx) -> Any:
    """An `abc` class's virtual subclasses: the classes registered with it (`Kind.register(float)`)
    or with any of its subclasses, which `isinstance(x, c)` asks too. `abc` keeps them in C state
    (`_abc_impl`), read through `abc._get_dump`; each is keyed as the class it is (one that is an
    `abc` class itself brings its own). Every `register` anywhere moves `abc`'s cache token,
    which `_class_state` holds: the key is then computed again. A class defined later whose
    `__subclasshook__` answers for `c` is not seen."""
    if _get_dump is None:
        return unreadable(c, ctx)
    found: dict[int, type] = {}
    seen: set[int] = set()
    pending = [c]
    while pending:
        x = pending.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        try:
            registry = _get_dump(x)[0]
        except Exception:  # noqa: BLE001
            if x is c:
                return unreadable(c, ctx)
            continue  # A subclass that is not an `abc` class: it has no registry.
        for ref in registry:
            t = ref()
            if t is not None:
                found[id(t)] = t
        pending.extend(type.__subclasses__(x))
    # In a fixed order: the registry is a set.
    return tuple([key(t, ctx, False) for _, t in sorted(found.items(), key=_first)])


def _first(item: tuple) -> Any:
    return item[0]


_get_dump = getattr(abc, "_get_dump", None)


# A member's bookkeeping that says nothing its name in the class does not: its class (keyed
# already, and the member's key would be in terms of itself) and its place among the members.
_MEMBER_BOOKKEEPING = frozenset({"__objclass__", "_name_", "_sort_order_"})


def _members(c: type, ctx: Ctx) -> tuple:
    """What an enum class's own members hold: each member's value and the attributes its
    `__init__` set (the Python docs' `Planet` with `self.mass`), keyed as what they are (a dict
    value: by identity and contents, watched), and one state of them all, so that
    `Planet.EARTH.mass = 3.0` or `Preset.SMALL.value["scale"] = 2.0` is seen by a function that
    reads `Planet.EARTH.mass`. A plain enum's members (an `int` or a `str` value) key to the
    same thing for every function, which then share."""
    members = c.__dict__.get("_member_map_") if isinstance(c, enum.EnumMeta) else None
    if not members:
        return ()
    ctx.states.append((c, _members_state, _members_state(c)))
    out = []
    for name, member in members.items():
        d = getattr(member, "__dict__", None)
        if type(d) is not dict:  # A member without a plain `__dict__`: by its value alone.
            out.append((name, key(member._value_, ctx, False)))
            continue
        out.append(
            (
                name,
                tuple(
                    [(k, key(v, ctx, False)) for k, v in d.items() if k not in _MEMBER_BOOKKEEPING]
                ),
            )
        )
    return tuple(out)


def _members_state(c: type) -> tuple:
    """Every member's attributes in one flat tuple, compared with `is` on the hit path: where
    each member's `__dict__` is an exact dict (the usual case), read in C (`_FLAT`: all sizes,
    then all names, then all values; a 20,000-member enum: no loop in Python), else member by
    member (its size, names and values, or its value where it has no such `__dict__`)."""
    dicts = _member_dicts(c)
    if dicts is not None:
        lengths = list(map(len, dicts))
        if max(lengths) > 256:
            lengths = list(map(size, lengths))
        return (
            _FLAT,
            *lengths,
            *chain.from_iterable(dicts),
            *chain.from_iterable(map(dict.values, dicts)),
        )
    out: list = []
    for member in c.__dict__["_member_map_"].values():
        d = getattr(member, "__dict__", None)
        if type(d) is dict:
            out += (size(len(d)), *d.keys(), *d.values())
        else:
            out.append(member._value_)
    return tuple(out)


# Heads the state `_members_state` reads in C: no member-by-member state starts with it.
_FLAT = object()
_dict_of = operator.attrgetter("__dict__")


def _member_dicts(c: type) -> list | None:
    # Each member's `__dict__`, where there are members and every one has an exact dict.
    try:
        dicts = list(map(_dict_of, c.__dict__["_member_map_"].values()))
    except Exception:
        return None
    if not dicts or len(set(map(type, dicts))) != 1 or type(dicts[0]) is not dict:
        return None
    return dicts


def _members_valid(c: type, state: tuple) -> bool:
    """`_members_state(c)` matches `state` item by item by `is`, compared where the members
    are, without building it (the hit path: `Watch.valid` calls it as the state function's
    `valid`)."""
    if not state or state[0] is not _FLAT:
        now = _members_state(c)
        return len(now) == len(state) and all(map(operator.is_, now, state))
    dicts = _member_dicts(c)
    if dicts is None:
        return False
    n = len(dicts)
    # Sizes as exact ints, compared by value in C (a state's are `size`d to compare by `is`).
    if list(map(len, dicts)) != list(islice(state, 1, n + 1)):
        return False
    total = sum(map(len, dicts))
    if len(state) != 1 + n + 2 * total:
        return False
    start = 1 + n
    return all(
        map(operator.is_, chain.from_iterable(dicts), islice(state, start, start + total))
    ) and all(
        map(
            operator.is_,
            chain.from_iterable(map(dict.values, dicts)),
            islice(state, start + total, None),
        )
    )


_members_state.valid = _members_valid  # pyright: ignore[reportFunctionMemberAccess]


def _class_state(c: type) -> tuple:
    # Its bases, names and metaclass can be assigned too (`C.__bases__ = (D,)` changes the MRO).
    # JAX's registry entry for it too (`_registered`).
    d = c.__dict__
    node = registry_entry(c)
    if "_abc_impl" in d:
        # `abc`'s cache token, moved by every `register` (`_abc_registry`).
        token = size(abc.get_cache_token())  # pyright: ignore (an `int`)
        return (c.__bases__, c.__name__, c.__qualname__, type(c), node, token, *_entries(c, d))
    return (c.__bases__, c.__name__, c.__qualname__, type(c), node, *_entries(c, d))


# The descriptors `type` makes for a class's own slots and its instances' `__dict__` and
# `__weakref__`: each holds its class strongly.
_SLOT_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType)


_SLOT_DESCRIPTOR_IDS = frozenset(map(id, _SLOT_DESCRIPTORS))


# What stands in a class's state for one of its own slot descriptors under its own name.
_OWN_SLOT = object()


def _entries(c: type, d: Any) -> tuple:
    # A class's own slot descriptor under its own name stands in the state as `_OWN_SLOT`: the
    # state holding it would keep a class made at run time alive for ever (it holds its class).
    # `type` makes one per name and never another, so the entry rebound to anything else (another
    # class's descriptor, or this one under another name, included) still changes the state.
    values = list(d.values())
    if _SLOT_DESCRIPTOR_IDS.isdisjoint(map(id, map(type, values))):
        # No descriptor of a slot among them (a 20,000-member enum's namespace: scanned in C).
        return (size(len(d)), *values)
    return (
        size(len(d)),
        *[
            _OWN_SLOT
            if type(v) in _SLOT_DESCRIPTORS and v.__objclass__ is c and v.__name__ == k
            else v
            for k, v in d.items()
        ],
    )
