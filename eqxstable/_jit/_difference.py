"""How one leaf or node of a call's signature differs from an earlier call's, in words: a
`Difference` (the kind of miss, the path, the reason with its fix). `_explain.py` pairs the
parts of two signatures and picks the closest earlier call."""

import types
from typing import Any, NamedTuple

import jax

from .._compat import code_qualname
from .._keys import (
    FunctionKey,
    Identity,
    key_uses_identity,
    MutableKey,
    too_many_objects,
    too_many_reaching,
)
from .._keys._context import MAX_OBJECTS
from ._accounting import MissKind
from ._advice import another_function, function_change
from ._signature import ArrayLeaf, Node, StaticLeaf


_SCALARS = (bool, int, float, complex)
SAME_STRUCTURE = "pass arguments of the same structure every call."


class Difference(NamedTuple):
    kind: MissKind
    path: str
    reason: str


def _describe_array(a: ArrayLeaf) -> str:
    weak = " (weakly typed)" if a.weak_type else ""
    # `str`, not `.name`: a typed key's dtype reads `key<fry>`, `float0`'s NumPy name is `void`.
    return f"{_dtype_name(a.dtype)}{list(a.shape)}{weak}"


def _describe_static(s: StaticLeaf) -> str:
    return f"{s.type.__name__} {s.text}"


def _is_key(dtype: Any) -> bool:
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _dtype_name(dtype: Any) -> str:
    if dtype == jax.dtypes.float0:
        return "float0"
    return str(dtype)


def too_many_reason(path: str, key: Any = None) -> str:
    """The reason of a miss whose static value (of key `key`) reaches more objects than a key
    may walk, naming what the walk ran out in where the key says."""
    reaching = too_many_reaching(key)
    within = f": {reaching}" if reaching else ""
    return (
        f"`{path}` reaches too many objects to key (more than {MAX_OBJECTS:,}{within}), so it "
        "equals nothing and every call traces it again (nothing changed: it cannot be watched); "
        "pass large data as an array argument, or keep it out of what the function captures "
        "and reads."
    )


def _static_difference(path: str, old: StaticLeaf, new: StaticLeaf) -> Difference:
    if too_many_objects(new.key):
        return Difference("identity", path, too_many_reason(path, new.key))
    described = function_change(path, old.key, new.key)
    if described is not None:
        kind, reason = described
        return Difference(kind, path, reason)  # pyright: ignore[reportArgumentType]
    before, after = _callable_name(old), _callable_name(new)
    if before is not None and after is not None and before != after:
        # `jax.nn.relu` -> `jax.nn.gelu`: another computation, not a new object to build once.
        return Difference(
            "static", path, another_function(path, f"`{before}`", f"`{after}`", False)
        )
    if old.type is new.type and (
        (_by_identity(old) and _by_identity(new))
        or (old.text == new.text and old.type not in _SCALARS)
    ):
        # Compared by identity, or nothing that can be shown changed: either way a new object
        # of the same kind was passed where an equal one was expected.
        return Difference(
            "identity",
            path,
            f"`{path}` is compared by identity and a new but similar-looking {new.type.__name__} "
            f"was passed ({old.text} -> {new.text}); build it once and reuse it, use "
            "`es.StableModule`/`es.stabilize`/`es.intern`, or give its class value equality.",
        )
    if old.type in _SCALARS and new.type in _SCALARS:
        fix = (
            "every distinct value compiles a new program; to trace it instead, pass "
            "`jnp.asarray(value)` or store it with `es.field(dynamic=True)`."
        )
    else:
        fix = "every distinct value compiles a new program; keep it fixed or pass it as an array."
    return Difference(
        "static",
        path,
        f"static value `{path}` changed: {_describe_static(old)} -> {_describe_static(new)}; {fix}",
    )


def _callable_name(leaf: StaticLeaf) -> str | None:
    """The name of a function-like static value (`jax.nn.relu`, a user function, a callable
    object), or `None` for anything else."""
    if issubclass(leaf.type, type) or not any("__call__" in vars(c) for c in leaf.type.__mro__):
        return None
    parts = leaf.key.parts
    if type(parts) is FunctionKey:
        return code_qualname(parts.code)
    if type(parts) is MutableKey:
        parts = parts.identity
    obj = parts.obj if isinstance(parts, Identity) else None
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    return name if isinstance(name, str) else None


def _by_identity(leaf: StaticLeaf) -> bool:
    """Whether the value is compared by identity: a fallback for a changeable object, or an
    object whose own equality is identity (a JAX `Jaxpr`), but not a class or a module."""
    if key_uses_identity(leaf.key):
        return True
    return isinstance(leaf.key.parts, Identity) and not issubclass(
        leaf.type, (type, types.ModuleType)
    )


def _array_difference(path: str, old: ArrayLeaf, new: ArrayLeaf) -> Difference | None:
    change = f"{_describe_array(old)} -> {_describe_array(new)}"
    if old.shape != new.shape:
        return Difference(
            "shape",
            path,
            f"`{path}` changed shape: {change}; every new shape compiles a new program, so pad or "
            "bucket inputs to a few shapes.",
        )
    if old.dtype != new.dtype:
        fix = "cast it to one dtype before the call."
        if any(_is_key(d) for d in (old.dtype, new.dtype)):
            fix = (
                "make every key with the same PRNG implementation (`jax.random.key(seed, "
                "impl=...)`) and the same kind (typed `jax.random.key`, not raw `PRNGKey` data)."
            )
        return Difference("dtype", path, f"`{path}` changed dtype: {change}; {fix}")
    if old.weak_type != new.weak_type:
        return Difference(
            "weak_type",
            path,
            f"`{path}` changed weak type: {change}; a weakly typed array comes from a Python "
            "scalar, so create it with an explicit dtype (`jnp.asarray(x, dtype=...)`) or store "
            "the hyperparameter with `es.field(dynamic=True)` every time.",
        )
    # A tracer (a call under `jax.grad`, `jax.vmap`) has no sharding to compare (`None`): no
    # difference, or a static argument that changed would be blamed on the array.
    if old.sharding is not None and new.sharding is not None and old.sharding != new.sharding:
        return Difference(
            "sharding",
            path,
            f"`{path}` changed sharding: {old.sharding} -> {new.sharding}; place it with the "
            "same sharding every call (`jax.device_put(x, sharding)`).",
        )
    return None


def leaf_difference(path: str, old: Any, new: Any) -> Difference | None:
    if type(old) is ArrayLeaf and type(new) is ArrayLeaf:
        return _array_difference(path, old, new)
    if type(old) is StaticLeaf and type(new) is StaticLeaf:
        return None if old.key == new.key else _static_difference(path, old, new)
    was, now = (
        _describe_array(x) if isinstance(x, ArrayLeaf) else _describe_static(x) for x in (old, new)
    )
    scalar = any(type(x) is StaticLeaf and x.type in _SCALARS for x in (old, new))
    kind: MissKind = "weak_type" if scalar else "static"
    return Difference(
        kind,
        path,
        f"`{path}` switched between an array and a static value: {was} -> {now}; Python "
        "scalars are static (one program per value) while arrays are traced, so pass "
        "`jnp.asarray(value)` every time.",
    )


def node_differences(path: str, old: Node, new: Node) -> list[Difference]:
    if old.type is not new.type:
        return [
            Difference(
                "structure",
                path,
                f"`{path}` changed pytree node type: {old.type.__name__} -> "
                f"{new.type.__name__}; pass arguments of the same structure every call.",
            )
        ]
    if old.data_key == new.data_key:
        return []
    if old.fields is not None and new.fields is not None and old.fields.keys() == new.fields.keys():
        found = [
            _static_difference(f"{path}.{name}", old.fields[name], new.fields[name])
            for name in old.fields
            if old.fields[name].key != new.fields[name].key
        ]
        if found:
            return found
    what = "keys" if new.type is dict else "pytree node data"
    return [
        Difference(
            "structure",
            path,
            f"`{path}` ({new.type.__name__}) changed its {what}: {old.data_text} -> "
            f"{new.data_text}; pass arguments of the same structure every call.",
        )
    ]
