"""Keys of objects that can change in place (`K-mutable`, `K-mapping-proxy`): lists, dicts,
sets, bytearrays and plain objects by their identity and their contents, watched; as pytree node
data, lists, dicts and sets by their contents alone."""

import types
from typing import Any

from ._budget import big_container
from ._context import compound, Ctx, key
from ._origin import library_class
from ._per_class import per_class, type_ids
from ._scalars import scalar_run
from ._state import (
    added_state,
    class_part,
    dict_state,
    extra_attrs,
    hidden_state,
    list_state,
    protocol_plain,
    slot_values,
    state_of,
    unreadable,
)
from ._types import Identity, MutableKey
from ._watch import MISSING


def _mutable(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """An object that can change in place: this very object, and what it holds now (watched)."""
    if ctx.by_value and id(type(obj)) in _LIST_DICT_SET:
        return _container_contents(obj, ctx)
    if ctx.by_value and _fields_eq(type(obj)):
        # Node data (a custom node's aux data) that is a dataclass with the generated `==`: JAX
        # compares it by its fields, so it is keyed by them, not by identity (each flatten may
        # make a new one), and the object held is watched like any other. Its fields live in
        # its `__dict__` or in a slot a base class declares: both are keyed, as an object's are.
        plain = protocol_plain(type(obj))
        ctx.states.append((obj, state_of(plain), state_of(plain)(obj)))
        slots = tuple([(n, key(v, ctx, False)) for n, v in slot_values(obj, plain)])
        attrs = extra_attrs(obj, ctx, watched=True, plain=plain)
        return (type(obj), key(type(obj), ctx, False), attrs, slots)
    if id(type(obj)) in _BASES and type(obj) is not bytearray and len(obj) > _FEW:
        # An exact list, dict or set too big to walk, or keyed so before and unchanged.
        held = big_container(obj, ctx)
        if held is not None:
            return held
    ctx.identity = True
    if isinstance(obj, (list, set, bytearray)):
        # Item by item, as a list: a set's items, a bytearray's small ints (one object each).
        ctx.states.append((obj, list_state, list_state(obj)))
        contents: Any = _items(obj, ctx)
    elif isinstance(obj, dict):
        ctx.states.append((obj, dict_state, dict_state(obj)))
        contents = _dict_items(obj, ctx)
    elif hidden_state(type(obj)):
        return unreadable(obj, ctx)
    else:
        # Read from its storage, not through what its class says of itself (`_state.layout`).
        plain = protocol_plain(type(obj))
        ctx.states.append((obj, state_of(plain), state_of(plain)(obj)))
        slots = tuple([(n, key(v, ctx, False)) for n, v in slot_values(obj, plain)])
        attrs = extra_attrs(obj, ctx, watched=True, plain=plain)
        contents = (key(type(obj), ctx, False), attrs, slots)
        return MutableKey(Identity(obj), (type(obj), contents))
    t = type(obj)
    if id(t) not in _BASES:
        # A subclass: its methods run in the trace, it may hold attributes and slots, and a
        # library's may hold C fields (`defaultdict.default_factory`), all keyed and watched.
        fields = c_fields(t)
        if fields:
            ctx.states.append((obj, _c_state, _c_state(obj)))
        c_parts = tuple([(n, key(getattr(obj, n, MISSING), ctx, False)) for n in fields])
        contents = (contents, class_part(t, ctx), added_state(obj, ctx), c_parts)
    return MutableKey(Identity(obj), (t, contents))


# By identity (`type_ids`): a user's metaclass may call its class equal to `list`.
_BASES = type_ids((list, dict, set, bytearray))
_LIST_DICT_SET = type_ids((list, dict, set))
# Shorter containers are walked: neither the budget nor the memo of `big_container` concerns them.
_FEW = 256


@per_class
def c_fields(t: type) -> tuple[str, ...]:
    """The fields a library class's C code declares (member and attribute descriptors of its
    own, such as `defaultdict.default_factory`), below the builtin container it extends."""
    return tuple(
        name
        for c in t.__mro__
        if id(c) not in _BASES and c is not object and library_class(c)
        for name, d in vars(c).items()
        if (type(d) is types.MemberDescriptorType or type(d) is types.GetSetDescriptorType)
        and name not in ("__dict__", "__weakref__")
    )


def _c_state(obj: Any) -> tuple:
    return tuple([getattr(obj, n, MISSING) for n in c_fields(type(obj))])


mutable = compound(_mutable)


@per_class
def _fields_eq(cls: type) -> bool:
    """Whether `cls` is a dataclass whose `==` is the one `dataclasses` generated (its fields
    compared as a tuple, type-exactly), without slots or a `__getattr__` of its own."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.eq or "__slots__" in cls.__dict__ or hidden_state(cls):
        return False
    for c in cls.__mro__:
        if "__eq__" in c.__dict__:
            eq = c.__dict__["__eq__"]
            code = getattr(eq, "__code__", None)
            generated = code is not None and code.co_filename == "<string>"
            return c is cls and generated and not hasattr(cls, "__getattr__")
    return False


@compound
def mapping_proxy(obj: types.MappingProxyType, ctx: Ctx, content_ok: bool) -> Any:
    """A read-only view of a mapping that can change underneath (a class's `__dict__`, a view the
    user made of a dict): this very view and the items it shows now, watched."""
    ctx.identity = True
    ctx.states.append((obj, dict_state, dict_state(obj)))  # pyright: ignore[reportArgumentType]
    items = tuple([(key(k, ctx, False), key(v, ctx, False)) for k, v in obj.items()])
    return MutableKey(Identity(obj), (types.MappingProxyType, items))


def _container_contents(obj: Any, ctx: Ctx) -> Any:
    if type(obj) is dict:
        ctx.states.append((obj, dict_state, dict_state(obj)))
        return (dict, _dict_items(obj, ctx))
    ctx.states.append((obj, list_state, list_state(obj)))
    return (type(obj), _items(obj, ctx))


def _items(obj: Any, ctx: Ctx) -> Any:
    # `K-scalar-run` where every item is of one exact scalar type, else item by item.
    fast = scalar_run(obj, ctx)
    if fast is not None:
        return fast
    return tuple([key(x, ctx, False) for x in obj])


def _dict_items(d: dict, ctx: Ctx) -> Any:
    keys = scalar_run(d, ctx)
    values = scalar_run(d.values(), ctx) if keys is not None else None
    if values is not None:
        return ("scalar-dict", keys, values)
    return tuple([(key(k, ctx, False), key(v, ctx, False)) for k, v in d.items()])
