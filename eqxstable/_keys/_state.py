"""What an object holds beyond what its kind's row keys: its attributes and slots, keyed and
watched (the state functions a `Watch` compares), the class of an object keyed by value, and the
objects whose state Python can neither read nor watch (`K-opaque`, `K-impure-library`)."""

import ctypes
import types
from typing import Any

import numpy as np

from ._context import Ctx, key
from ._origin import library_class
from ._per_class import per_class
from ._types import Identity
from ._watch import dict_state as dict_state, list_state as list_state, MISSING, size


# Attributes that never change what an object computes; `__annotations__` is a fresh dict per
# function, which would otherwise make every rebuilt function look new.
IGNORED_ATTRS = frozenset({"__doc__", "__annotations__", "__module__", "__qualname__"})


def class_part(t: type, ctx: Ctx) -> Any:
    """The class of an object keyed by value whose methods can run in the trace (a NamedTuple's
    `__call__`, a partial subclass's): a user's class keyed as a class (`K-user-class`: what its
    methods read is followed, its namespace watched), a library's by itself with what JAX's pytree
    registry and `abc` say of it (`_registries.library_class`)."""
    return key(t, ctx, False)


def added_state(obj: Any, ctx: Ctx, skip: Any = ()) -> tuple:
    """What an object holds beyond what its kind's row keys (`skip`: a dataclass's fields): its
    attributes and the slots its class declares, each keyed as what it is, watched. A subclass
    of a kind on the allowlist may add either; neither may be left out of its key."""
    slots = [(n, v) for n, v in slot_values(obj) if n not in skip]
    if slots:
        state = state_of(protocol_plain(type(obj)))
        ctx.states.append((obj, state, state(obj)))
    return (
        extra_attrs(obj, ctx, skip=skip),
        tuple([(n, key(v, ctx, False)) for n, v in slots]),
    )


def extra_attrs(
    obj: Any, ctx: Ctx, skip: Any = (), watched: bool = False, plain: bool | None = None
) -> tuple:
    """`watched`: whether the caller watches `object_state(obj)` already, which covers the
    attributes (one state less an object on every hit). `plain`: `protocol_plain`'s answer for
    its class, where the caller has it."""
    if plain is None:
        plain = protocol_plain(type(obj))
    d = instance_dict(obj, plain)
    if not d:
        return ()
    if type(d) is dict and not watched:
        state = attrs_state if plain else real_attrs_state
        ctx.states.append((obj, state, state(obj)))
    return tuple(
        [(k, key(v, ctx, False)) for k, v in d.items() if k not in skip and k not in IGNORED_ATTRS]
    )


def holds_data(obj: Any, ctx: Ctx, skip: Any = ()) -> None:
    """`K-builtin-subclass`, `K-tuple`, `K-frozen-dataclass`, `K-numpy-scalar`: a value whose
    object holds data of its own beyond its kind's row (an attribute in its `__dict__` other than
    `skip` and what `functools.wraps` sets, a slot set), which code may read back and its owner
    change later (`q.scale = 3.0`): never substituted by `intern` (`ctx.own_eq`), as for a
    function that owns data. Its equal twin elsewhere holds another dict. Keyed by value still
    (the data is keyed and watched)."""
    d = instance_dict(obj)
    if d and any(
        k not in skip and k not in IGNORED_ATTRS and not _wraps_made(k, v) for k, v in d.items()
    ):
        ctx.own_eq = True
        return
    for name, v in slot_values(obj):
        if name not in skip and v is not MISSING:
            ctx.own_eq = True
            return


def takes_data(obj: Any, ctx: Ctx) -> None:
    """`K-builtin-subclass`, `K-tuple`, `K-numpy-scalar`: an instance of a user's subclass of a
    builtin value whose storage can take data later (a `__dict__`, a slot, set or not): its
    owner may set `m2.mode.factor = 4.0` after `intern` ran, which must change that object
    alone, so it is never substituted (`ctx.own_eq`), whatever it holds now (`holds_data` asks
    what it holds now). A library's class (optax's `GradientTransformationExtraArgs`, a
    NamedTuple subclass without `__slots__`) is the library's code, which sets nothing later
    (documented: a program setting attributes on a library's value shares them)."""
    t = type(obj)
    has_dict, _, names, _ = layout(t)
    if (has_dict or names) and not library_class(t):
        ctx.own_eq = True


def owns_data(obj: Any) -> bool:
    """Whether `obj`'s own `__dict__` holds data that code may read back and change in place
    (`f.scale`, `f.__scale__` too), not only what `functools.wraps` sets (`WRAPS_SETS`: the exact
    names it assigns, each holding the kind of object it copies): such an object is never
    substituted by `intern` (`ctx.own_eq`)."""
    d = instance_dict(obj)
    if not d:
        return False
    copied = _wraps_copied(d)
    return any(not _wraps_made(k, v) and copied.get(k, _NOT_COPIED) is not v for k, v in d.items())


def _wraps_copied(d: dict) -> dict:
    """The `__dict__` of the function a wrapper's `__wrapped__` names, whose entries
    `functools.wraps` copied into the wrapper's own (`jax.vmap(jnp.sin)` holds `jnp.sin`'s `_fun`
    and `_jit_info`): an entry that is still the very object the wrapped function holds is its
    metadata, as the dunders `wraps` copies are, not data of the wrapper's own."""
    wrapped = d.get("__wrapped__")
    if wrapped is None or type(wrapped) is types.FunctionType or not library_class(type(wrapped)):
        # A function's or a user object's `__dict__` is the user's to change: only what `wraps`
        # copied from a library's C object (a `jax.jit` function's attributes) counts.
        return {}
    try:
        found = vars(wrapped)
    except Exception:  # No `__dict__`, or a hostile one.
        return {}
    return found if type(found) is dict else {}


_NOT_COPIED = object()


def _wraps_made(name: str, v: Any) -> bool:
    # Whether `name` is one that `functools.wraps` sets, holding the kind of object it copies.
    kinds = WRAPS_SETS.get(name)
    if kinds is None:
        return False
    # By identity: a user's metaclass may call its class equal to `str`.
    return callable(v) if kinds is callable else any(type(v) is k for k in kinds)


# What `functools.update_wrapper` puts in a wrapper's `__dict__` (a function keeps the others in
# slots of its own; a partial or a callable object has only its `__dict__`): each exact name, with
# the types of what it copies there. The wrapped function's own attributes, which it copies too
# (its `__dict__`), are data like any other.
WRAPS_SETS: dict[str, Any] = {
    "__wrapped__": callable,
    "__module__": (str, type(None)),
    "__name__": (str,),
    "__qualname__": (str,),
    "__doc__": (str, type(None)),
    "__annotations__": (dict,),
    "__type_params__": (tuple,),
}


def attrs_state(obj: Any) -> tuple:
    d = obj.__dict__
    return (type(obj), size(len(d)), *d.keys(), *d.values())


def real_attrs_state(obj: Any) -> tuple:
    d = instance_dict(obj, False)
    return (type(obj), size(len(d)), *d.keys(), *d.values())


# `type`'s own descriptors: a metaclass can shadow `cls.__mro__` or `cls.__dict__` with its own.
_MRO = type.__dict__["__mro__"].__get__
_NAMESPACE = type.__dict__["__dict__"].__get__
_DICT_OFFSET = type.__dict__["__dictoffset__"].__get__
_MEMBER = types.MemberDescriptorType
_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)
# `PyObject_GenericGetDict`: an object's own `__dict__` slot, read past whatever its class binds
# to the name (a class body's `__dict__ = {}` takes the place of the descriptor `type` makes).
# About 1 us a call: only for the classes whose attribute protocol does not read the slot.
_GENERIC_DICT = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object, ctypes.c_void_p)(
    ("PyObject_GenericGetDict", ctypes.pythonapi)
)


# Per class (`per_class`, held weakly): whether its instances have a `__dict__` slot, whether the
# lookup of `__dict__` meets `type`'s descriptor for it, the names of its slots, whether its
# classes' `__slots__` entries name a slot no member descriptor reads. Names and flags only: a
# descriptor held here would keep the class alive.
@per_class
def layout(cls: type) -> tuple:
    """How an instance of `cls` holds its state, read from what `type` made, never from what the
    class says of itself: whether it has a `__dict__` slot, whether `obj.__dict__` is that slot
    (a class body may bind the name: `__dict__ = {}`), and its slots as the member descriptors
    in its classes' namespaces (`__slots__` is plain data once the class is made: an iterator
    `type` consumed, or rebound), with whether a `__slots__` entry names one no descriptor reads
    (deleted: `hidden_state`). What can be rebound later (a `__getattribute__`, a class attribute
    over a slot's name) is `protocol_plain`'s, asked at each keying."""
    mro = _MRO(cls)
    has_dict = bool(_DICT_OFFSET(cls))
    by_type = False
    if has_dict:
        for c in mro:
            d = _NAMESPACE(c).get("__dict__")
            if d is not None:
                # The first one the lookup meets: `type`'s descriptor for the class that added
                # the slot (which `type` never lets code rebind or delete), or a stand-in.
                by_type = type(d) in _DESCRIPTORS and d.__objclass__ is c
                break
    names: list[str] = []
    disagree = False
    for c in mro:
        ns = _NAMESPACE(c)
        if "__slots__" not in ns and library_class(c):
            continue  # A C class's own fields are its row's (`_mutable.c_fields`), not slots.
        own = _members(c)
        declared = ns.get("__slots__", ())
        if isinstance(declared, (str, tuple, list)):
            disagree |= any(
                isinstance(n, str)
                and n not in ("__dict__", "__weakref__")
                and _mangled(c, n) not in own
                for n in _declared(declared)
            )
        names += own
    return (has_dict, by_type, tuple(names), disagree)


def _members(c: type) -> list[str]:
    # The slots `type` made for `c` itself: member descriptors of its own (one of another class
    # bound under a name is that class's).
    return [
        n
        for n, d in _NAMESPACE(c).items()
        if type(d) is _MEMBER and d.__objclass__ is c and n not in ("__dict__", "__weakref__")
    ]


def protocol_plain(t: type) -> bool:
    """Whether reading an instance of `t` through its attribute protocol (`obj.__dict__`,
    `getattr(obj, slot)`) reads its own storage: `type`'s descriptor for `__dict__`, no class but
    `object` answering attribute reads itself (`__getattribute__`, or `__getattr__` where
    `__dict__` or a slot may be missing), and each slot's name met
    first as its member descriptor (not a class attribute over it). Asked at each keying, never
    remembered: a class may be given a `__getattribute__` later, and its namespace is watched
    beside the object's state, so whatever relied on the answer is keyed anew then."""
    has_dict, by_type, names, _ = layout(t)
    if has_dict and not by_type or len(set(names)) != len(names):
        # A slot's name declared again below: `getattr` reads only the lowest one.
        return False
    mro = _MRO(t)
    # A `__getattr__` answers what the lookup does not find: `__dict__` where there is none, a
    # slot that is unset.
    hooks = ("__getattribute__", "__getattr__") if names or not has_dict else ("__getattribute__",)
    if any(h in _NAMESPACE(c) for c in mro if c is not object for h in hooks):
        return False
    for n in names:
        for c in mro:
            d = _NAMESPACE(c).get(n, MISSING)
            if d is not MISSING:
                if type(d) is not _MEMBER:
                    return False
                break
    return True


def instance_dict(obj: Any, plain: bool | None = None) -> Any:
    """`obj`'s own `__dict__` (or `None`), read through the slot `type` made for it where the
    object's own attribute protocol (`__getattribute__`, a class attribute named `__dict__`) may
    show something else than where `obj.scale = 3.0` stores. `plain`: `protocol_plain`'s answer
    for its class, where the caller has it."""
    t = type(obj)
    if not layout(t)[0]:
        return None
    if plain is None:
        plain = protocol_plain(t)
    return obj.__dict__ if plain else _GENERIC_DICT(obj, None)


def slots_of(cls: type) -> tuple[str, ...]:
    """The names of the slots `cls` and its bases have (as stored: a private name mangled)."""
    return layout(cls)[2]


def slot_values(obj: Any, plain: bool | None = None) -> tuple:
    """`(name, value)` of each slot of `obj` (`MISSING` where unset): by `getattr` where that
    reads the slot (`protocol_plain`), else through the member descriptors themselves."""
    t = type(obj)
    if plain is None:
        plain = protocol_plain(t)
    if plain:
        return tuple([(n, getattr(obj, n, MISSING)) for n in slots_of(t)])
    return tuple(
        [
            (n, _slot(obj, _NAMESPACE(c)[n]))
            for c in _MRO(t)
            if "__slots__" in _NAMESPACE(c) or not library_class(c)
            for n in _members(c)
        ]
    )


def _slot(obj: Any, d: Any) -> Any:
    try:
        return d.__get__(obj)
    except AttributeError:
        return MISSING


def _declared(slots: Any) -> Any:
    # As `type.__new__` reads `__slots__`: a `str` is one name, anything else is iterated.
    return (slots,) if isinstance(slots, str) else slots


def _mangled(c: type, name: str) -> str:
    if name.startswith("__") and not name.endswith("__"):
        return f"_{c.__name__.lstrip('_')}{name}"
    return name


def object_state(obj: Any) -> tuple:
    # Its class too: `obj.__class__ = B` changes every method the trace runs. Read through the
    # attribute protocol: the state of the objects whose class reads its storage so
    # (`protocol_plain`); `real_object_state` for the others.
    t = type(obj)
    attrs = getattr(obj, "__dict__", None)
    slots = tuple(getattr(obj, name, MISSING) for name in slots_of(t))
    if attrs is None:
        return (t, *slots)
    return (t, size(len(attrs)), *attrs.keys(), *attrs.values(), *slots)


def real_object_state(obj: Any) -> tuple:
    """`object_state` read from the object's storage itself (`instance_dict`, `slot_values`),
    for a class whose attribute protocol may show something else."""
    attrs = instance_dict(obj, False)
    slots = tuple([v for _, v in slot_values(obj, False)])
    if attrs is None:
        return (type(obj), *slots)
    return (type(obj), size(len(attrs)), *attrs.keys(), *attrs.values(), *slots)


def state_of(plain: bool) -> Any:
    """The state function that watches an object whose class's protocol is plain or not."""
    return object_state if plain else real_object_state


class _Unread:
    __slots__ = ("__weakref__",)


def unreadable(obj: Any, ctx: Ctx) -> Any:
    """`K-opaque`: an object whose state Python can neither read nor watch (a C object: a
    `ContextVar`, a `random.Random`, a NumPy `Generator`, an `itertools.count`, a lock, a file).
    Keyed on its own, it is itself (`stable_key` of it equals only itself). Reached from anything
    that reads it, a key equal to nothing, not even this object's next key: a reader is never
    shared with another reader (a rebuilt function reading it traces again, as under
    `equinox.filter_jit`), while the very same reader keeps its key through the memo and its
    watch (a hit, as there)."""
    ctx.identity = True
    if ctx.depth == 0:
        return Identity(obj)
    ctx.unread = True
    return ("opaque", Identity(_Unread()))


def impure_library(obj: Any, ctx: Ctx) -> Any:
    """`K-impure-library`: a library's callable or module that is not on the allowlist of those
    computing from their arguments only (`_pure.pure_library`), reached by a reader (a user's
    function loading it, a partial or a cell holding it). What it reads when called (`os.environ`
    through `os.getenv`, NumPy's print options, a logger's level, a global random state) is seen
    by no key: its reader gets a key equal to nothing, as with `unreadable`, and keeps it through
    the memo. The part names the callable, for the jit layer's account of the miss."""
    ctx.identity = True
    ctx.unread = True
    return ("library-state", describe_library(obj), Identity(_Unread()))


def describe_library(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    if isinstance(obj, types.FunctionType):
        # Where its code is, not the names `functools.wraps` copied.
        code = obj.__code__
        where = getattr(code, "co_qualname", code.co_name)
        return f"{obj.__globals__.get('__name__')}.{where}"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    module = getattr(obj, "__module__", None)
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if not isinstance(name, str):
        return type(obj).__qualname__
    return f"{module}.{name}" if isinstance(module, str) else name


_POINTER = np.dtype(np.intp).itemsize


@per_class
def hidden_state(t: type) -> bool:
    """Whether instances of `t` hold state in C that Python cannot read: an instance is larger
    than `object`'s, its `__dict__` and weak reference list and its slots explain (a C base such
    as `_random.Random`, a Cython class such as NumPy's `Generator`), or of variable size. A C
    base that adds nothing (`datetime.tzinfo`, `types.SimpleNamespace`) hides nothing."""
    if t.__itemsize__ or layout(t)[3]:
        # Or a slot its class declared that no member descriptor of its class reads now (one
        # deleted from the namespace: only code that kept the descriptor reads it).
        return True
    return t.__basicsize__ > object.__basicsize__ + _POINTER * (2 + len(slots_of(t)))
