"""Keys of values: numbers and strings by exact type and bits, immutable containers by their
items, objects that can change in place by their identity and their contents, NumPy arrays by
dtype, shape and bytes, and objects with an `==` of their own by that `==` (never substituted)."""

import dataclasses
import enum
import functools as ft
import struct
import types
from typing import Any

import numpy as np

from ._context import compound, Ctx, frozen_part, identity, key, too_deep
from ._origin import library_class, library_module, own_class, pure_library
from ._per_class import per_class, PerClass, ref
from ._scalars import scalar_run
from ._types import Equal, Identity, MutableKey, Namespace
from ._watch import ArrayState, MISSING, size


_pack_double = struct.Struct("<d").pack
# Attributes that never change what an object computes; `__annotations__` is a fresh dict per
# function, which would otherwise make every rebuilt function look new.
IGNORED_ATTRS = frozenset({"__doc__", "__annotations__", "__module__", "__qualname__"})


def value(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    return (type(obj), obj)


def float_(obj: float, ctx: Ctx, content_ok: bool) -> Any:
    # Bits, not `==`: `0.0` and `-0.0` differ, and a NaN equals a NaN with the same bits.
    return (float, _pack_double(obj))


def complex_(obj: complex, ctx: Ctx, content_ok: bool) -> Any:
    return (complex, _pack_double(obj.real), _pack_double(obj.imag))


def numpy_scalar(obj: np.generic, ctx: Ctx, content_ok: bool) -> Any:
    t = type(obj)
    if library_class(t):
        return (t, dtype_key(obj.dtype), obj.tobytes())
    # A user's subclass: its methods run in the trace, its attributes are read.
    return (class_part(t, ctx), dtype_key(obj.dtype), obj.tobytes(), added_state(obj, ctx))


@ft.lru_cache(maxsize=1024)
def _dtype_key(dtype: np.dtype) -> Any:
    # The full description: `str` alone says `|V8` for every 8-byte structured dtype.
    return (dtype.str, repr(dtype), dtype.isalignedstruct)


def dtype_key(dtype: np.dtype) -> Any:
    try:
        return _dtype_key(dtype)
    except TypeError:
        return repr(dtype)


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


@compound
def tuple_(obj: tuple, ctx: Ctx, content_ok: bool) -> Any:
    fast = scalar_run(obj)
    if fast is not None:
        return (tuple, fast)
    frozen = frozen_part(obj, ctx)
    if frozen is not None:
        return frozen
    return (tuple, tuple([key(x, ctx, content_ok) for x in obj]))


@compound
def tuple_subclass(obj: tuple, ctx: Ctx, content_ok: bool) -> Any:
    # NamedTuples and other subclasses: the exact class, the items and any instance attributes,
    # whatever `__eq__` the class defines. Only NamedTuples are rebuilt with read-only arrays.
    content_ok = content_ok and hasattr(obj, "_make")
    items = tuple([key(x, ctx, content_ok) for x in obj])
    return (class_part(type(obj), ctx), items, extra_attrs(obj, ctx))


def class_part(t: type, ctx: Ctx) -> Any:
    """The class of an object keyed by value whose methods can run in the trace (a NamedTuple's
    `__call__`, a partial subclass's): a user's class keyed as a class (`K-user-class`: what its
    methods read is followed, its namespace watched), a library's by itself, a constant."""
    return t if library_class(t) else key(t, ctx, False)


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
    frozen = frozen_part(obj, ctx)
    if frozen is not None:
        return frozen
    items = tuple([key(x, ctx, content_ok) for x in obj])
    t = type(obj)
    if t is frozenset:
        return (t, items)
    # A subclass: its methods run in the trace, and it may hold attributes and slots.
    return (class_part(t, ctx), items, added_state(obj, ctx))


@compound
def builtin_subclass(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """A subclass of `int`, `float`, `complex`, `str` or `bytes`: its exact type, the builtin
    value (never the subclass's own `==`) and its attributes."""
    # Its class as any class is keyed (a user's: its namespace, watched), and its slots too.
    state = added_state(obj, ctx)
    for base in (bool, int, float, complex, str, bytes):
        if isinstance(obj, base):
            return (key(type(obj), ctx, False), key(base(obj), ctx, False), state)  # pyright: ignore
    return identity(obj, ctx)


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


def owns_data(obj: Any) -> bool:
    """Whether `obj`'s own `__dict__` holds data that code may read back and change in place
    (`f.scale`), not only the dunders that `functools.wraps` copies (`__wrapped__`, `__doc__`):
    such an object is never substituted by `intern` (`ctx.own_eq`)."""
    d = getattr(obj, "__dict__", None)
    if not d:
        return False
    copied = _wraps_copied(d)
    return any(
        not (k[:2] == "__" == k[-2:]) and copied.get(k, _NOT_COPIED) is not v for k, v in d.items()
    )


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


def attrs_state(obj: Any) -> tuple:
    d = obj.__dict__
    return (type(obj), size(len(d)), *d.keys(), *d.values())


def list_state(obj: Any) -> tuple:
    return (size(len(obj)), *obj)


def dict_state(d: dict) -> tuple:
    return (size(len(d)), *d.keys(), *d.values())


_slot_names: PerClass[tuple[str, ...]] = PerClass()


def slots_of(cls: type) -> tuple[str, ...]:
    """The names of the slots `cls` and its bases declare, as attributes are read: a single
    string is one slot (`__slots__ = "scale"`, not five), and a private name is mangled as the
    class body's own code reads it (`__x` in `C` is `_C__x`)."""
    names = _slot_names.get(ref(cls))
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
    computing from their arguments only (`_origin.pure_library`), reached by a reader (a user's
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


def _mutable(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """An object that can change in place: this very object, and what it holds now (watched)."""
    if ctx.by_value and type(obj) in (list, dict, set):
        return _container_contents(obj, ctx)
    if ctx.by_value and _fields_eq(type(obj)):
        # Node data (a custom node's aux data) that is a dataclass with the generated `==`: JAX
        # compares it by its fields, so it is keyed by them, not by identity (each flatten may
        # make a new one), and the object held is watched like any other.
        ctx.states.append((obj, object_state, object_state(obj)))
        return (type(obj), key(type(obj), ctx, False), extra_attrs(obj, ctx))
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
        ctx.states.append((obj, object_state, object_state(obj)))
        slots = tuple((n, key(getattr(obj, n, MISSING), ctx, False)) for n in slots_of(type(obj)))
        contents = (key(type(obj), ctx, False), extra_attrs(obj, ctx, watched=True), slots)
        return MutableKey(Identity(obj), (type(obj), contents))
    t = type(obj)
    if t not in _BASES:
        # A subclass: its methods run in the trace, it may hold attributes and slots, and a
        # library's may hold C fields (`defaultdict.default_factory`), all keyed and watched.
        fields = c_fields(t)
        if fields:
            ctx.states.append((obj, _c_state, _c_state(obj)))
        c_parts = tuple([(n, key(getattr(obj, n, MISSING), ctx, False)) for n in fields])
        contents = (contents, class_part(t, ctx), added_state(obj, ctx), c_parts)
    return MutableKey(Identity(obj), (t, contents))


_BASES = frozenset({list, dict, set, bytearray})


@per_class
def c_fields(t: type) -> tuple[str, ...]:
    """The fields a library class's C code declares (member and attribute descriptors of its
    own, such as `defaultdict.default_factory`), below the builtin container it extends."""
    return tuple(
        name
        for c in t.__mro__
        if c not in _BASES and c is not object and library_class(c)
        for name, d in vars(c).items()
        if type(d) in (types.MemberDescriptorType, types.GetSetDescriptorType)
        and name not in ("__dict__", "__weakref__")
    )


def _c_state(obj: Any) -> tuple:
    return tuple([getattr(obj, n, MISSING) for n in c_fields(type(obj))])


mutable = compound(_mutable)


def _c_base(t: type) -> type:
    """The nearest class in `t`'s MRO written in C (not a heap type): the one holding its state."""
    return next(c for c in t.__mro__ if not c.__flags__ & _HEAPTYPE)


_HEAPTYPE = 1 << 9


@per_class
def _fields_eq(cls: type) -> bool:
    """Whether `cls` is a dataclass whose `==` is the one `dataclasses` generated (its fields
    compared as a tuple, type-exactly), without slots or a `__getattr__` of its own."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.eq or "__slots__" in cls.__dict__:
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


@compound
def descriptor(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`property`, `classmethod`, `staticmethod`: the functions they run (which cannot be
    reassigned), keyed as functions, so that a property reading a global is followed."""
    if type(obj) is property:
        parts = (obj.fget, obj.fset, obj.fdel)
    else:
        parts = (obj.__func__,)
    return (type(obj), tuple([key(f, ctx, False) for f in parts]))


def _container_contents(obj: Any, ctx: Ctx) -> Any:
    if type(obj) is dict:
        ctx.states.append((obj, dict_state, dict_state(obj)))
        return (dict, _dict_items(obj, ctx))
    ctx.states.append((obj, list_state, list_state(obj)))
    return (type(obj), _items(obj, ctx))


def _items(obj: Any, ctx: Ctx) -> Any:
    # `K-scalar-run` where every item is of one exact scalar type, else item by item.
    fast = scalar_run(obj)
    if fast is not None:
        return fast
    return tuple([key(x, ctx, False) for x in obj])


def _dict_items(d: dict, ctx: Ctx) -> Any:
    keys = scalar_run(d)
    values = scalar_run(d.values()) if keys is not None else None
    if values is not None:
        return ("scalar-dict", keys, values)
    return tuple([(key(k, ctx, False), key(v, ctx, False)) for k, v in d.items()])


def ndarray(obj: np.ndarray, ctx: Ctx, content_ok: bool) -> Any:
    if obj.dtype.hasobject:
        if obj.dtype.names is not None:
            # A structured dtype with an object field: its bytes are pointers, and its records
            # read back as Python values lose what a field's bytes hold (`S` strips trailing
            # NULs). Its reader is identity-keyed (`K-opaque`), never shared.
            return unreadable(obj, ctx)
        return object_array(obj, ctx, content_ok)
    contents = (np.ndarray, dtype_key(obj.dtype), obj.shape, obj.tobytes())
    if content_ok:
        ctx.copied_arrays = True
        return contents
    # Reached through a callable or an object, where it stays the user's mutable array.
    ctx.identity = True
    ctx.blobs.append((obj, ArrayState(obj, contents[3])))
    return MutableKey(Identity(obj), contents)


@compound
def ndarray_subclass(obj: np.ndarray, ctx: Ctx, content_ok: bool) -> Any:
    """`K-mutable`: a subclass of `np.ndarray` (`np.memmap`, `np.ma.MaskedArray`, a user's) is
    itself, its bytes, shape and dtype watched as a reached array's are (read through a plain
    view: a masked array's `tobytes` fills what it masks), its class keyed as a class (its
    methods run in the trace) and its attributes (a mask, a file's map) and slots as what they
    are. One with Python objects for items, or a C base that is not `np.ndarray`: `K-opaque`."""
    t = type(obj)
    if obj.dtype.hasobject or _c_base(t) is not np.ndarray:
        return unreadable(obj, ctx)
    plain = np.ndarray.view(obj, np.ndarray)
    data = plain.tobytes()
    ctx.identity = True
    ctx.states.append((obj, object_state, object_state(obj)))
    ctx.blobs.append((obj, ArrayState(plain, data)))
    slots = tuple((n, key(getattr(obj, n, MISSING), ctx, False)) for n in slots_of(t))
    attrs = extra_attrs(obj, ctx, watched=True)
    contents = (key(t, ctx, False), dtype_key(obj.dtype), obj.shape, data, attrs, slots)
    return MutableKey(Identity(obj), contents)


def _object_state(a: np.ndarray) -> tuple:
    # The dtype object and the shape (`a.shape = (2, 1)` keeps the items), then the items
    # themselves, which an object array holds as references (`tolist` returns those very objects).
    return (a.dtype, *map(size, a.shape), *a.ravel().tolist())


@compound
def object_array(obj: np.ndarray, ctx: Ctx, content_ok: bool) -> Any:
    """`K-array-reached`, `K-array-top`: an array of dtype `object`. Its bytes are pointers, so
    it is never keyed by them: it is itself (identity, never substituted) and each item keyed as
    what it is (a list by identity and contents, a user object by its attributes), watched; an
    item holding the array itself is a cycle like any other."""
    ctx.identity = True
    ctx.states.append((obj, _object_state, _object_state(obj)))
    items = _items(obj.ravel().tolist(), ctx)
    return MutableKey(Identity(obj), (dtype_key(obj.dtype), obj.shape, items))


@compound
def frozen_dataclass(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """A frozen dataclass or an Equinox module: its exact class and its fields by value.

    A dict held by a library's module is the module's own (the `keywords` of `equinox.Partial`):
    keyed by its contents and watched. A user's module could share its dicts and lists with the
    caller, so they are keyed as usual (identity and contents)."""
    t = type(obj)
    values = []
    owned = _owns_dicts(t)
    d = getattr(obj, "__dict__", None) or {}
    for name in field_names(t):
        raw = d.get(name, MISSING)
        v = getattr(obj, name, MISSING)
        if getattr(type(raw), "eqxstable_static_form", False) and v is not raw[0]:
            # A `StableModule`'s static list or dict reads back as a fresh copy each time: it is
            # keyed by the canonical form the instance holds instead.
            v = raw
        if owned and type(v) is dict:
            if v:
                # Its own dict (`equinox.Partial`'s keywords), which can still change in place:
                # an equal module elsewhere reads another one, so never substituted.
                ctx.own_eq = True
            ctx.states.append((v, dict_state, dict_state(v)))
            values.append((name, dict, tuple((k, key(x, ctx, False)) for k, x in v.items())))
        else:
            values.append((name, key(v, ctx, False)))
    # A subclass may declare slots that are not fields (`class B(A): __slots__ = ("extra",)`).
    # eqxstable's own compute with their fields alone, by design (a wrapper's counters).
    skip = field_names(t) + slots_of(t) if own_class(t) else field_names(t)
    return (key(t, ctx, False), tuple(values), added_state(obj, ctx, skip=skip))


def _owns_dicts(t: type) -> bool:
    # A library's module (`equinox.Partial`, the wrapper `equinox.filter_vmap` returns) builds
    # its dicts from `**kwargs` and never changes them: installed packages are constants.
    return library_class(t)


@per_class
def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


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
    for c in cls.__mro__:
        if c is object or library_class(c):
            continue
        d = c.__dict__
        ctx.states.append((c, _class_state, _class_state(c)))
        # An enum's members and its `_sunder_` bookkeeping are made by its class body and
        # cannot be reassigned; keying a member whole would only key it in terms of itself. What
        # a member holds (its value, its attributes) is keyed by `_members`.
        skip = _enum_made(c)
        # A NamedTuple's bookkeeping (its field names and defaults), made by its class body:
        # the objects it holds, never walked (a dict of defaults would name the class by identity).
        made = _NAMEDTUPLE_MADE if issubclass(c, tuple) else _ABC_MADE
        # Dunder data (`__dataclass_fields__`, `__slots__`, `__match_args__`) is derived from
        # the class body, and methods that `dataclasses` generates from the fields (`generated`,
        # and wrapped with a `set` of its own for `__repr__`) add nothing the
        # fields do not say: each is the object the class holds, never walked, so that
        # reassigning one (`C.__match_args__ = ("b", "a")`, read by `match`) is a new key.
        # Dunder methods (`__call__`, `__add__`) are what a trace runs, and are keyed; the code
        # a field runs (a `default_factory`, Equinox's `converter`) is keyed by `_field_code`.
        items = tuple(
            # `abc`'s bookkeeping (a C object caching `isinstance` answers) is the class's
            # own: itself, not a hidden state that makes the class a key equal to nothing.
            (
                k,
                Namespace(v)
                if k == "_abc_impl" or k in made or _held(k, v)
                else key(v, ctx, False),
            )
            for k, v in d.items()
            if k not in IGNORED_ATTRS and k not in skip
        )
        out.append((Namespace(c), items, _members(c, ctx), _field_code(d, ctx)))
    # What code reads of a class beyond its namespace: its names (`type(x).__name__`), and its
    # metaclass, whose attributes its instances' class serves (`C.SCALE` from `Meta.SCALE`).
    meta = key(type(cls), ctx, False)
    return ("class", Namespace(cls), cls.__name__, cls.__qualname__, meta, tuple(out))


_ABC_MADE = frozenset({"_abc_impl"})
_NAMEDTUPLE_MADE = _ABC_MADE | {"_fields", "_field_defaults"}


def _field_code(d: Any, ctx: Ctx) -> tuple:
    """What a dataclass's fields (`__dataclass_fields__`, dunder data) hold that runs when an
    instance is made: each field's `default_factory` and its metadata (Equinox keeps a field's
    `converter` there, which its metaclass calls), keyed as what they are."""
    fields = d.get("__dataclass_fields__")
    if type(fields) is not dict:
        return ()
    out = []
    for name, f in fields.items():
        meta = getattr(f, "metadata", None)
        if isinstance(meta, types.MappingProxyType):
            # `dataclasses` wraps the metadata given in a proxy of its own (one shared empty
            # proxy for none): its items, watched, and not the proxy's identity.
            ctx.states.append((meta, dict_state, dict_state(meta)))  # pyright: ignore
            meta = tuple((k, key(v, ctx, False)) for k, v in meta.items())
        else:
            meta = key(meta, ctx, False)
        out.append((name, key(getattr(f, "default_factory", None), ctx, False), meta))
    return tuple(out)


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
    # Every member's attributes in one flat tuple, compared with `is` on the hit path.
    out: list = []
    for member in c.__dict__["_member_map_"].values():
        d = getattr(member, "__dict__", None)
        if type(d) is dict:
            out += (size(len(d)), *d.keys(), *d.values())
        else:
            out.append(member._value_)
    return tuple(out)


def _enum_made(c: type) -> Any:
    if not isinstance(c, enum.EnumMeta):
        return ()
    members = c.__dict__.get("_member_map_", {})
    return {
        k
        for k, v in c.__dict__.items()
        if k in members or (_sunder(k) and not callable(v) and not isinstance(v, staticmethod))
    }


def _sunder(name: str) -> bool:
    return len(name) > 2 and name[0] == name[-1] == "_" and name[1] != "_" and name[-2] != "_"


def generated(f: Any) -> bool:
    """Whether `f` is a method `dataclasses` made from a class's fields: compiled from "<string>"
    inside its `__create_fn__` (Python 3.11 on, by the code's qualified name; on 3.10, which has
    none, by the file name alone). Any other `exec` also compiles from "<string>": such a method
    (`__call__ = ns["__call__"]`) is the user's code, keyed as any method is."""
    f = getattr(f, "__wrapped__", f)
    code = getattr(f, "__code__", None)
    if code is None or code.co_filename != "<string>":
        return False
    qualname = getattr(code, "co_qualname", None)
    return qualname is None or qualname.startswith("__create_fn__.<locals>.")


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _held(name: str, v: Any) -> bool:
    """Whether a class keys the entry `name` by the object it holds: dunder data, and the
    dunder methods `dataclasses` generates."""
    return _dunder(name) and (not callable(v) or generated(v))


def _class_state(c: type) -> tuple:
    # Its bases, names and metaclass can be assigned too (`C.__bases__ = (D,)` changes the MRO).
    d = c.__dict__
    return (c.__bases__, c.__name__, c.__qualname__, type(c), size(len(d)), *d.values())


def served_by_class(t: type, attr: str | None) -> bool:
    """Whether the class `t` of a module, a subclass of `ModuleType`, may serve the attribute
    `attr` (`None`: any attribute but dunders) in place of the module's dict: it holds an
    attribute of that name (a property), or a `__getattribute__` or `__getattr__` of its own."""
    for c in t.__mro__:
        if c is types.ModuleType or c is object:
            continue
        d = c.__dict__
        if "__getattribute__" in d or "__getattr__" in d:
            return True
        if attr in d if attr is not None else any(not (k[:2] == "__" == k[-2:]) for k in d):
            return True
    return False


IMPORT_MADE = frozenset({"__spec__", "__loader__", "__builtins__"})


def module_class(m: types.ModuleType) -> tuple:
    # `m.__class__ = M` can make a class serve names the module's dict does not hold.
    return (type(m),)


def module(m: types.ModuleType, ctx: Ctx, content_ok: bool) -> Any:
    if library_module(m):
        # Read whole by a reader (a global used other than as `m.attr`, a cell, an attribute of
        # a user's module): whatever it then calls must be on the allowlist.
        if ctx.depth > 0 and not pure_library(m):
            return impure_library(m, ctx)
        return Namespace(m)
    return user_module(m, ctx, content_ok)


@compound
def user_module(m: types.ModuleType, ctx: Ctx, content_ok: bool) -> Any:
    """A module of the user's own, read whole (passed on, not just `m.attr`): every name in it,
    and its class where that is not `ModuleType`; one whose class may serve names in place of
    its dict is a key equal to nothing."""
    t = type(m)
    if t is not types.ModuleType and served_by_class(t, None):
        return too_deep(m, ctx)
    d = m.__dict__
    ctx.states.append((d, dict_state, dict_state(d)))
    ctx.states.append((m, module_class, module_class(m)))
    # Every name by value, a private `__scale` and `__version__` too, but the import system's
    # own objects (made afresh by `importlib.reload`): the builtins are read as builtins.
    items = tuple((k, key(v, ctx, False)) for k, v in d.items() if k not in IMPORT_MADE)
    if t is not types.ModuleType:
        return ("module", Namespace(m), items, key(t, ctx, False))
    return ("module", Namespace(m), items)


def jax_array(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    # Immutable, and too costly to key by contents: this very array.
    ctx.identity = True
    return Identity(obj)
