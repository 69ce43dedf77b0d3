"""Library registries that the program extends at run time: their tables are library *data*,
though the classes and functions they serve are library code. A trace reads them wherever it
flattens a pytree, tests `isinstance` against an `abc` class or calls a
`functools.singledispatch` function, so each is keyed where a key can see it:

- JAX's table of pytree node types (`_structure._REGISTRY`), for a library class keyed as a
  class (an object's type, a class held as a value): whether it is registered, and the flatten
  and unflatten registered for it (`K-library-code`);
- `abc`'s cache token, moved by every `register` of any `abc` class anywhere, for a library
  class and (`_classes.user_class`) a user's class: `numbers.Real.register(MyScalar)` changes
  what `isinstance(s, numbers.Real)` answers;
- a `functools.singledispatch` function's registry (`K-dispatch`): the classes by identity and
  the functions registered for them by their keys.
"""

import abc
import types
import weakref
from typing import Any

import equinox as eqx

from ._context import Ctx, key
from ._origin import library_code_object, SINGLEDISPATCH_CODE
from ._state import dict_state, extra_attrs
from ._structure import _REGISTRY
from ._types import Identity, MutableKey, Namespace
from ._watch import MISSING, size


def abc_token() -> int:
    """`abc`'s cache token as one object per value (compared with `is` by a watch)."""
    return size(abc.get_cache_token())  # pyright: ignore (an `int`)


def _token_state(_: Any) -> tuple:
    return (abc_token(),)


def watch_abc_token(ctx: Ctx) -> int:
    """The cache token now, watched: every `register` of any `abc` class moves it. One state per
    computation (and `_watch.merge` keeps one per object and state function)."""
    if ctx.abc_token is not None:
        return ctx.abc_token
    token = ctx.abc_token = abc_token()
    ctx.states.append((abc, _token_state, (token,)))
    return token


# The `abc` classes that name each class as a virtual subclass, as of one cache token:
# `(token, {id(cls): (weak cls, (weak abc class, ...))})`, built again once the token moved.
_index: list = [None, {}]


def _abc_index() -> dict:
    """Which `abc` classes (a library's or the user's) hold each class in their registry of
    virtual subclasses, found by a walk of every class (through `type.__subclasses__` from
    `object`, about 4,000 classes in 10 ms with JAX, Equinox and lineax loaded) once per cache
    token: `register` is what moves it, and it is rare past the imports. Weakly held: keying a
    class never keeps it alive."""
    token = abc.get_cache_token()
    if _index[0] == token:
        return _index[1]
    found: dict[int, tuple] = {}
    seen: set[int] = set()
    pending: list = [object]
    while pending:
        c = pending.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        try:
            pending.extend(type.__subclasses__(c))
        except TypeError:  # pragma: no cover - not a class.
            continue
        if "_abc_impl" not in _CLASS_DICT(c) or _get_dump is None:
            continue
        try:
            registry = _get_dump(c)[0]
        except Exception:  # noqa: BLE001
            continue
        for r in registry:
            t = r()
            if t is not None:
                held = found.get(id(t))
                found[id(t)] = (r, (*(held[1] if held else ()), weakref.ref(c)))
    _index[0], _index[1] = token, found
    return found


_get_dump = getattr(abc, "_get_dump", None)
# `type`'s own `__dict__` descriptor: a metaclass can shadow `cls.__dict__` with one of its own.
_CLASS_DICT = type.__dict__["__dict__"].__get__


def virtual_bases(cls: type, ctx: Ctx) -> tuple:
    """The `abc` classes that name `cls` or a class of its MRO as a virtual subclass
    (`numbers.Real.register(MyScalar)`, which nothing of `MyScalar` shows, yet which changes what
    `isinstance(s, numbers.Real)` answers in a trace), by identity, in a fixed order; with
    `abc`'s cache token watched, so a `register` anywhere computes the key again, the same
    where it did not concern `cls`. Unseen: a builtin type registered with a library `abc` class
    (`numbers.Real.register(str)`), as a `str` is keyed by value. Without `abc._get_dump`, the
    token itself (a retrace after any `register`)."""
    token = watch_abc_token(ctx)
    if _get_dump is None:  # pragma: no cover - CPython has it.
        return (token,)
    index = _abc_index()
    out: dict[int, type] = {}
    for m in cls.__mro__:
        entry = index.get(id(m))
        if entry is None or entry[0]() is not m:
            continue
        for r in entry[1]:
            a = r()
            if a is not None:
                out[id(a)] = a
    return tuple([Namespace(a) for _, a in sorted(out.items(), key=_first)])


def _first(item: tuple) -> Any:
    return item[0]


def library_class(cls: type, ctx: Ctx) -> Any:
    """`K-library-code`: a library class, keyed as a class (an object's type, a class held as a
    value). Its code is constant, but two tables the program extends answer for it: JAX's pytree
    registry (`register_pytree_node(types.SimpleNamespace, ...)` changes what
    `jax.tree.leaves(cfg)` returns) and `abc`'s virtual subclasses (`Mapping.register(cls)`
    changes `isinstance(cfg, Mapping)`). Its registry entry (or its absence) and `abc`'s cache
    token are keyed and watched; a flatten and unflatten registered for it are keyed as what
    they are (a user's lambda reads globals)."""
    entry = _REGISTRY.get(cls, MISSING)
    ctx.names.append((_REGISTRY, cls, entry))
    token = virtual_bases(cls, ctx)
    data = library_class_data(cls, ctx)
    if entry is MISSING:
        return ("library-class", Namespace(cls), token, data)
    if issubclass(cls, eqx.Module):
        # Equinox registers every module class as it is made, with code it generates from the
        # fields (library code, constant), so it is never seen unregistered.
        return ("library-class", Namespace(cls), token, data, "module")
    nodes = tuple([_node_fn(f, ctx) for f in entry[:2]])
    return ("library-class", Namespace(cls), token, data, nodes)


# The types of a class attribute that is data, not code: a value a program may rebind
# (`json.JSONEncoder.item_separator = ",  "`, `eqx.nn.Linear.SCALE = 3.0`).
_DATA = frozenset([int, float, complex, str, bytes, bool, type(None)])
_HEAPTYPE = 1 << 9
_NAMESPACE = type.__dict__["__dict__"].__get__
_FLAGS = type.__dict__["__flags__"].__get__
_MRO = type.__dict__["__mro__"].__get__


def library_class_data(cls: type, ctx: Ctx) -> tuple:
    """`K-library-code`: the data of a library class and its library bases: the class attributes
    holding a plain value (a number, string, bytes, `None`, or a tuple of such), which a program
    may rebind (`json.JSONEncoder.item_separator`), unlike the class's code. By name and value,
    each entry watched; a C type's namespace cannot change, and is left out."""
    out = []
    for c in _MRO(cls):
        if not _FLAGS(c) & _HEAPTYPE:
            continue
        ns = _NAMESPACE(c)
        for name, value in ns.items():
            if _is_data(value) and not (name[:2] == "__" and name[-2:] == "__"):
                ctx.names.append((ns, name, value))
                out.append((name, type(value), value))
    return tuple(out)


def _is_data(value: Any) -> bool:
    t = type(value)
    if t in _DATA:
        return True
    return t is tuple and len(value) <= 16 and all(type(v) in _DATA for v in value)


def _node_fn(f: Any, ctx: Ctx) -> Any:
    """A flatten or unflatten registered for a library class: library code (JAX's own for
    `OrderedDict`, what Equinox generates for a module) by itself, a constant; the user's (a
    lambda reading globals) keyed as what it is. Two equal keys name this very class, so these
    very functions: their own data does not stop `intern`."""
    if library_code_object(f):
        return Namespace(f)
    own_eq = ctx.own_eq
    part = key(f, ctx, False)
    ctx.own_eq = own_eq
    return part


#
# `functools.singledispatch`.
#


def dispatch_registry(f: Any) -> dict | None:
    """The registry of a function made by `functools.singledispatch` (also the `dispatcher` of a
    `functools.singledispatchmethod`), or `None` for anything else. Told by its code, which is
    functools' own wrapper's, and read from the `dispatch` function it closes over: the
    `registry` attribute is only a read-only view of it."""
    if type(f) is not types.FunctionType or f.__code__ is not SINGLEDISPATCH_CODE:
        return None
    view = f.__dict__.get("registry")
    if type(view) is not types.MappingProxyType:
        return None
    dispatch = f.__dict__.get("dispatch")
    cells = getattr(dispatch, "__closure__", None) or ()
    names = getattr(getattr(dispatch, "__code__", None), "co_freevars", ())
    for name, cell in zip(names, cells):
        if name == "registry":
            registry = cell.cell_contents
            return registry if type(registry) is dict else None
    return None


def singledispatch(f: types.FunctionType, ctx: Ctx, content_ok: bool) -> Any:
    """`K-dispatch`: a `functools.singledispatch` function, library code whose registry is the
    program's data (lineax's `lx.diagonal` is extended with `@lx.diagonal.register(MyOp)`). By
    its identity (its registry is its own: two are never one key) and, for each class in its
    registry, the class by identity and the function registered for it keyed as what it is (a
    user's implementation reads globals); the registry is watched (a `register` adds or replaces
    an entry), and so is `abc`'s cache token where a registered class is an `abc` class (whose
    virtual subclasses `dispatch` consults). Not its `dispatch_cache`, which `register` clears
    and each call fills from the registry. Called by `_functions.function`, which walks `f` as
    one object (`compound`)."""
    registry = dispatch_registry(f)
    assert registry is not None
    ctx.identity = True
    ctx.states.append((registry, dict_state, dict_state(registry)))
    items = tuple([(Namespace(cls), key(impl, ctx, False)) for cls, impl in registry.items()])
    abstract = any(hasattr(cls, "__abstractmethods__") for cls in registry)
    token = watch_abc_token(ctx) if abstract else None
    # What `update_wrapper` copied from the function it wraps, and what the program sets on it
    # (`f.scale = 2.0`, read by an implementation), keyed and watched; functools' own attributes
    # (watched: `f.dispatch = other` is seen) are the registry keyed above.
    attrs = extra_attrs(f, ctx, skip=_MADE)
    return MutableKey(Identity(f), ("singledispatch", items, token, attrs))


# The attributes `functools.singledispatch` sets on the function it makes.
_MADE = frozenset({"register", "dispatch", "registry", "_clear_cache"})
