"""What an object holds beyond what its kind's row keys: its attributes and slots, keyed and
watched (the state functions a `Watch` compares), the class of an object keyed by value, and the
objects whose state Python can neither read nor watch (`K-opaque`, `K-impure-library`)."""

import types
from typing import Any

import numpy as np

from ._context import Ctx, key
from ._origin import library_class
from ._per_class import per_class, PerClass
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
    slots = [n for n in slots_of(type(obj)) if n not in skip]
    if slots:
        ctx.states.append((obj, object_state, object_state(obj)))
    return (
        extra_attrs(obj, ctx, skip=skip),
        tuple([(n, key(getattr(obj, n, MISSING), ctx, False)) for n in slots]),
    )


def extra_attrs(obj: Any, ctx: Ctx, skip: Any = (), watched: bool = False) -> tuple:
    """`watched`: whether the caller watches `object_state(obj)` already, which covers the
    attributes (one state less an object on every hit)."""
    d = getattr(obj, "__dict__", None)
    if not d:
        return ()
    if type(d) is dict and not watched:
        ctx.states.append((obj, attrs_state, attrs_state(obj)))
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
    d = getattr(obj, "__dict__", None)
    if d and any(
        k not in skip and k not in IGNORED_ATTRS and not _wraps_made(k, v) for k, v in d.items()
    ):
        ctx.own_eq = True
        return
    for name in slots_of(type(obj)):
        if name not in skip and getattr(obj, name, MISSING) is not MISSING:
            ctx.own_eq = True
            return


def owns_data(obj: Any) -> bool:
    """Whether `obj`'s own `__dict__` holds data that code may read back and change in place
    (`f.scale`, `f.__scale__` too), not only what `functools.wraps` sets (`WRAPS_SETS`: the exact
    names it assigns, each holding the kind of object it copies): such an object is never
    substituted by `intern` (`ctx.own_eq`)."""
    d = getattr(obj, "__dict__", None)
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


_slot_names: PerClass[tuple[str, ...]] = PerClass()


def slots_of(cls: type) -> tuple[str, ...]:
    """The names of the slots `cls` and its bases declare, as attributes are read: a single
    string is one slot (`__slots__ = "scale"`, not five), and a private name is mangled as the
    class body's own code reads it (`__x` in `C` is `_C__x`)."""
    names = _slot_names.get(id(cls))
    if names is None:
        names = tuple(
            _mangled(c, name)
            for c in cls.__mro__
            for name in _declared(c.__dict__.get("__slots__", ()))
            if isinstance(name, str) and name not in ("__dict__", "__weakref__")
        )
        _slot_names.put(cls, names)
    return names


def _declared(slots: Any) -> Any:
    # As `type.__new__` reads `__slots__`: a `str` is one name, anything else is iterated.
    return (slots,) if isinstance(slots, str) else slots


def _mangled(c: type, name: str) -> str:
    if name.startswith("__") and not name.endswith("__"):
        return f"_{c.__name__.lstrip('_')}{name}"
    return name


def object_state(obj: Any) -> tuple:
    # Its class too: `obj.__class__ = B` changes every method the trace runs.
    t = type(obj)
    attrs = getattr(obj, "__dict__", None)
    slots = tuple(getattr(obj, name, MISSING) for name in slots_of(t))
    if attrs is None:
        return (t, *slots)
    return (t, size(len(attrs)), *attrs.keys(), *attrs.values(), *slots)


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
    return ("opaque", Identity(_Unread()))


def impure_library(obj: Any, ctx: Ctx) -> Any:
    """`K-impure-library`: a library's callable or module that is not on the allowlist of those
    computing from their arguments only (`_pure.pure_library`), reached by a reader (a user's
    function loading it, a partial or a cell holding it). What it reads when called (`os.environ`
    through `os.getenv`, NumPy's print options, a logger's level, a global random state) is seen
    by no key: its reader gets a key equal to nothing, as with `unreadable`, and keeps it through
    the memo. The part names the callable, for the jit layer's account of the miss."""
    ctx.identity = True
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
    if t.__itemsize__:
        return True
    return t.__basicsize__ > object.__basicsize__ + _POINTER * (2 + len(slots_of(t)))
