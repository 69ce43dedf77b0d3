"""`stabilize`: every non-array leaf of a pytree replaced by its canonical instance.

The walk follows the PyTree structure (lists, tuples, NamedTuples, dicts, any registered node)
and also what `jax.tree_util` does not show: the static fields of Equinox modules and the
function of a `jax.tree_util.Partial`, because those are exactly the values that
`equinox.filter_jit` hashes and compares. Arrays are left alone. Nothing the caller passed in is
changed: a node whose parts change is rebuilt, and a node whose parts are all unchanged is
returned as it is, which makes the walk idempotent and cheap on a tree that is already stable.
"""

import dataclasses
import operator
from typing import Any, TypeVar

import jax
import jax.tree_util as jtu

from .._errors import StabilityWarning, warn
from .._keys._per_class import per_class
from .._registry import intern
from ._freezer import freeze
from ._given import remember
from ._kinds import Kind, kind_of, small_int
from ._known import is_known, mark_known
from ._paths import field_of, field_path, type_name
from ._static import freeze_static, Static


_T = TypeVar("_T")

MSG_ARRAY_IN_STATIC = (
    "`{call}`: the static field `{path}` holds a JAX array. A static field is part of the PyTree "
    "structure, hashed and compared on every call and never traced, so an array there is "
    "either an error or a recompile for every new array. Make `{field}` a regular field (drop "
    "`static=True`); if it must not be trained, filter it out or wrap its use in "
    "`jax.lax.stop_gradient`. A NumPy array is fine in a static field: it is kept read-only."
)
MSG_ARRAY_IN_STATIC_FIELD = (
    "`{call}`: A JAX array is being set as static! The static field `{path}` holds a JAX array, "
    "which becomes a constant of the compiled program: every new array compiles a new one, and "
    "it is never traced or trained. Make `{field}` a regular field (drop `static=True`); if it "
    "must not be trained, filter it out or wrap its use in `jax.lax.stop_gradient`. A NumPy "
    "array is fine in a static field: it is kept read-only."
)
MSG_FIELD_HASH_WITHOUT_EQ = (
    "`{call}`: `{path}` holds an instance of `{cls}`, a class that defines `__hash__` but not "
    "`__eq__`, so it can only be compared by identity and a rebuilt one always recompiles. "
    "Define `__eq__` consistently with `__hash__` in `{cls}` (or make it a frozen dataclass)."
)


@per_class
def _fields(cls: type) -> tuple[tuple[str, bool], ...]:
    return tuple(
        (f.name, bool(f.metadata.get("static", False)))
        for f in dataclasses.fields(cls)  # pyright: ignore[reportArgumentType]
    )


@per_class
def field_names(cls: type) -> tuple[str, ...]:
    """The names of the dataclass fields of `cls`."""
    return tuple(name for name, _ in _fields(cls))


@per_class
def static_fields(cls: type) -> tuple[dataclasses.Field, ...]:
    """The static dataclass fields of `cls`."""
    return tuple(
        f
        for f in dataclasses.fields(cls)  # pyright: ignore[reportArgumentType]
        if f.metadata.get("static", False)
    )


class _Walk:
    """One walk: `call` names the public call for messages (`Net(...)`, `eqxstable.stabilize`)."""

    __slots__ = ("call", "warn_arrays", "keep_mutable")

    def __init__(self, call: str, warn_arrays: bool = False, keep_mutable: bool = False):
        self.call = call
        # A `StableModule` warns about a JAX array in a static field, as Equinox does; the
        # walk of `eqxstable.stabilize` raises (a plain module holding one cannot be jitted).
        self.warn_arrays = warn_arrays
        # A `StableModule`'s non-static fields: a container that can change in place (a list, a
        # dict, a partial, any registered node but a tuple or a frozen dataclass) is kept as
        # the user gave it, as an `equinox.Module` keeps it: a copy holding the canonical items
        # would miss the user's later `stages["b"] = f` (`mutable_node`); an exact list's or
        # dict's items are made canonical in place (`in_place`). `stabilize` returns a new
        # tree, as `jax.tree.map` does, so it copies them.
        self.keep_mutable = keep_mutable

    def dynamic(self, obj: Any, path: Any) -> Any:
        """Where `jax.tree_util` sees the value: containers stay containers, arrays stay."""
        kind = kind_of(obj)
        if kind is Kind.LEAF:
            return intern(obj)
        if kind is Kind.ARRAY or kind is Kind.NONE:
            return obj
        if kind is Kind.INT:
            return obj if small_int(obj) else intern(obj)
        if kind is Kind.MODULE:
            if is_known(obj):
                return obj
            out = self.module(obj, path, False)
            mark_known(out)
            return out
        if self.keep_mutable and (kind is Kind.LIST or kind is Kind.DICT):
            # The user's own list or dict, which the program may change later: never a copy.
            # Its items are made canonical where they are (`intern` hands out only an
            # equivalent object), so a rebuilt module holding a fresh function there still
            # shares a program under plain `equinox.filter_jit`.
            self.in_place(obj, path)
            return obj
        if self.keep_mutable and (
            kind is Kind.PARTIAL or (kind is Kind.NODE and mutable_node(type(obj)))
        ):
            # A partial, an `OrderedDict`, a user's node: kept as given, items and all (a
            # rebuilt module holding a fresh function there is a missed sharing under plain
            # `equinox.filter_jit`, which `eqxstable.filter_jit` still keys by value).
            return obj
        if kind is Kind.LIST:
            items = [self.dynamic(x, (path, i)) for i, x in enumerate(obj)]
            return obj if all(map(operator.is_, items, obj)) else items
        if kind is Kind.TUPLE or kind is Kind.NAMEDTUPLE:
            items = [self.dynamic(x, (path, i)) for i, x in enumerate(obj)]
            if all(map(operator.is_, items, obj)):
                return obj
            return tuple(items) if kind is Kind.TUPLE else obj._make(items)
        if kind is Kind.DICT:
            values = {k: self.dynamic(v, (path, (k,))) for k, v in obj.items()}
            return obj if all(values[k] is v for k, v in obj.items()) else values
        if kind is Kind.PARTIAL:
            return self.partial(obj, path)
        if kind is Kind.NODE:
            return self.node(obj, path)
        return self.hash_without_eq(obj, path)

    def in_place(self, obj: Any, path: Any) -> None:
        """Makes the items of the exact list or dict `obj` canonical where they are."""
        if type(obj) is list:
            for i, x in enumerate(list(obj)):
                y = self.dynamic(x, (path, i))
                if y is not x:
                    obj[i] = y
        else:
            for k, v in list(obj.items()):
                y = self.dynamic(v, (path, (k,)))
                if y is not v:
                    obj[k] = y

    def static(self, obj: Any, path: Any) -> Any:
        """Inside a static field of a plain module: the value must become hashable, and arrays
        are not allowed. The module's code reads what is stored, so the hashable canonical forms
        of `_canonical.py` are stored, which read as the original (a `dict` subclass for a
        dict)."""
        return freeze(obj, self.static_leaf, path)

    def static_value(self, obj: Any, path: Any) -> Any:
        """The value of a static field of a `StableModule`: its canonical form (a `Static`),
        read back through the field's descriptor as assigned."""
        return freeze_static(obj, self.static_leaf, path)

    def static_leaf(self, obj: Any, path: Any) -> Any:
        kind = kind_of(obj)
        if kind is Kind.LEAF:
            return intern(obj)
        if kind is Kind.NONE:
            return obj
        if kind is Kind.INT:
            return obj if small_int(obj) else intern(obj)
        if kind is Kind.MODULE:
            # Interned too: a `StableModule` compares its static values by identity, and a
            # module rebuilt from equivalent parts must be the same static value.
            return intern(self.module(obj, path, True))
        if kind is Kind.ARRAY and isinstance(obj, jax.Array):
            where = dict(call=self.call, path=field_path(path), field=field_of(path))
            if self.warn_arrays:
                # As `equinox.Module` does (with the same first sentence): a warning, and the
                # array kept, compared by identity.
                warn(MSG_ARRAY_IN_STATIC_FIELD.format(**where), StabilityWarning)
                return obj
            raise ValueError(MSG_ARRAY_IN_STATIC.format(**where))
        if kind is Kind.HASH_WITHOUT_EQ:
            return self.hash_without_eq(obj, path)
        # NumPy scalars, frozen holders, partials and other nodes: keyed as one value.
        return intern(obj)

    def module(self, m: Any, path: Any, static: bool) -> Any:
        d = m.__dict__
        changes = None
        for name, is_static in _fields(type(m)):
            try:
                value = d[name]
            except KeyError:
                continue  # E.g. an abstract field implemented by a property.
            if is_static and type(value) is Static:
                continue  # A `StableModule`'s static field: canonical since construction.
            sub = (path, "." + name)
            new = self.static(value, sub) if static or is_static else self.dynamic(value, sub)
            if new is not value:
                if changes is None:
                    changes = {}
                changes[name] = new
        if changes is None:
            return m
        # A new instance, as `jax.tree_util.tree_unflatten` would make it: the module that was
        # passed in may be shared, so it is never changed.
        out = object.__new__(type(m))
        out.__dict__.update(d)
        out.__dict__.update(changes)
        return out

    def partial(self, p: jtu.Partial, path: Any) -> Any:
        # `jax.tree_util.Partial` keeps its function in the PyTree structure (static) and its
        # arguments as children. A `functools.partial` given as the function is kept boxed in a
        # shim that compares the partials with `==` (identity): the partial inside is interned,
        # and a new `Partial` boxes the canonical one again.
        old = p.func
        if type(old).__name__ == "_HashableCallableShim":
            old = old.fun  # pyright: ignore[reportFunctionMemberAccess]
        func = self.static_leaf(old, (path, ".func"))
        args = [self.dynamic(x, (path, i)) for i, x in enumerate(p.args)]
        keywords = {k: self.dynamic(v, (path, (k,))) for k, v in p.keywords.items()}
        if (
            func is old
            and all(map(operator.is_, args, p.args))
            and all(keywords[k] is v for k, v in p.keywords.items())
        ):
            return p
        return type(p)(func, *args, **keywords)

    def node(self, obj: Any, path: Any) -> Any:
        children, treedef = jtu.tree_flatten(obj, is_leaf=lambda x: x is not obj)
        new = [self.dynamic(x, (path, i)) for i, x in enumerate(children)]
        if all(map(operator.is_, new, children)):
            return obj
        return jtu.tree_unflatten(treedef, new)

    def hash_without_eq(self, obj: Any, path: Any) -> Any:
        # Warned here, with the field's name, rather than by `stable_key` with the class alone;
        # such an object would only be keyed by identity anyway, so it is kept as it is.
        cls = f"{type(obj).__module__}.{type(obj).__qualname__}"
        warn(
            MSG_FIELD_HASH_WITHOUT_EQ.format(call=self.call, path=field_path(path), cls=cls),
            StabilityWarning,
        )
        return obj


@per_class
def mutable_node(cls: type) -> bool:
    """Whether an instance of the registered PyTree node class `cls` can change in place (an
    `OrderedDict`, a `defaultdict`, a user's class): anything but a tuple and a frozen
    dataclass, whose new instance is indistinguishable from a rebuilt one."""
    if issubclass(cls, tuple):
        return False
    params = getattr(cls, "__dataclass_params__", None)
    return not (dataclasses.is_dataclass(cls) and params is not None and params.frozen)


_PLAIN_STATIC = (str, bool, type(None))


def stabilize_fields(module: Any, call: str) -> None:
    """Stabilizes the fields of a freshly built `StableModule` in place. Only for a module that
    nobody else has seen yet (inside its construction)."""
    walk = _Walk(call, warn_arrays=True, keep_mutable=True)
    root = type_name(type(module))
    d = module.__dict__
    for name, is_static in _fields(type(module)):
        try:
            value = d[name]
        except KeyError:
            continue
        if is_static:
            if type(value) is Static or any(type(value) is t for t in _PLAIN_STATIC):
                continue  # Made canonical during construction, the usual case.
            new = walk.static_value(value, (root, "." + name))
            remember(module, name, value, new)
        else:
            new = walk.dynamic(value, (root, "." + name))
        if new is not value:
            d[name] = new
    mark_known(module)


def stabilize_static(value: Any, owner: str, name: str) -> Any:
    """The canonical form of the value of the static field `owner.name` of a `StableModule`."""
    return _Walk(f"{owner}(...)", warn_arrays=True).static_value(value, (owner, "." + name))


def stabilize(tree: _T) -> _T:
    """Replaces every non-array leaf of `tree` with its canonical instance
    ([`eqxstable.intern`][]), as [`eqxstable.StableModule`][] does for its own fields.

    Use it on PyTrees you did not write as a `StableModule`: a plain `eqx.nn.MLP`, a third-party
    module, a tuple of callables. The walk goes into nested Equinox modules (static fields
    included), lists, tuples, NamedTuples, dicts, any registered PyTree node and the function of
    a `jax.tree_util.Partial`. Static fields holding a list, dict, set, frozenset or NumPy array
    or scalar become a hashable, read-only subclass of the same type, which reads as the
    original (`==`, iteration order, `jax.tree_util`, copies, `json`, `yaml`) but is compared
    type-exactly by JAX: `[1]` and `[1.0]` never share a program. Arrays are left as they are.

    Nothing is changed in place: a node whose parts change is rebuilt. `stabilize` is
    idempotent, and on an already-stable tree it returns the tree itself. Like `jax.tree.map`,
    it returns a new tree: a list or dict whose items become canonical is a new list or dict
    (a later change to the one passed in is not seen by the result). A
    [`eqxstable.StableModule`][] instead keeps the very list, dict or other changeable
    container given to a non-static field, as an `equinox.Module` does (a list's or dict's
    items made canonical where they are).

    **Arguments:**

    - `tree`: any PyTree.

    **Returns:**

    An equivalent PyTree whose non-array leaves are canonical, so that the same tree rebuilt
    from equivalent parts compares equal, and hits the cache of `equinox.filter_jit`.

    **Raises:**

    `ValueError` if a static field holds a JAX array.

    !!! example

        ```python
        import equinox as eqx
        import eqxstable as es
        import jax

        def make():
            mlp = eqx.nn.MLP(2, 2, 8, 2, activation=lambda x: x * 0.5, key=jax.random.key(0))
            return es.stabilize(mlp)

        assert make().activation is make().activation
        ```
    """
    return _Walk("eqxstable.stabilize").dynamic(tree, "tree")
