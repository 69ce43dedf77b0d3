"""Why a call missed, in words: the one explanation of a miss.

[`explain_stable_miss`][] names a value the function reads that was rebound, or a static argument
changed in place; otherwise [`diff`][] compares the call's signature (`_signature.py`) with the
earlier ones, picks the closest (fewest differences) and returns the `Miss` naming the first
difference, with advice that fits it.

This runs only on a miss, so it favours clear output over speed. It is the internal API the tools
(`eqxstable doctor`) build on, through the layer's door.
"""

import operator
import types
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax

from .._compat import code_qualname
from .._keys import FunctionKey, Identity, key_uses_identity, MutableKey, too_many_objects
from .._keys._context import MAX_OBJECTS
from ._accounting import Miss, MissKind
from ._advice import another_function, function_change
from ._describe import describe_change
from ._signature import ArrayLeaf, Node, Signature, StaticLeaf


_SCALARS = (bool, int, float, complex)
# A different pytree structure makes the leaves incomparable, so such an entry is "further" than
# any entry with the same structure.
_STRUCTURE_WEIGHT = 1_000_000
# The closest entry is searched among the latest signatures only (`explain_stable_miss`).
_HISTORY_SEARCHED = 64
_MSG_UNEXPLAINED = (
    "`{name}` compiled for arguments nested too deeply to compare with earlier calls."
)


class _Difference(NamedTuple):
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


def too_many_reason(path: str) -> str:
    """The reason of a miss whose static value reaches more objects than a key may walk."""
    return (
        f"`{path}` reaches too many objects to key (more than {MAX_OBJECTS:,}), so it equals "
        "nothing and every call traces it again; pass large data as an array argument, or keep "
        "it out of what the function captures and reads."
    )


def _static_difference(path: str, old: StaticLeaf, new: StaticLeaf) -> _Difference:
    if too_many_objects(new.key):
        return _Difference("identity", path, too_many_reason(path))
    described = function_change(path, old.key, new.key)
    if described is not None:
        kind, reason = described
        return _Difference(kind, path, reason)  # pyright: ignore[reportArgumentType]
    before, after = _callable_name(old), _callable_name(new)
    if before is not None and after is not None and before != after:
        # `jax.nn.relu` -> `jax.nn.gelu`: another computation, not a new object to build once.
        return _Difference(
            "static", path, another_function(path, f"`{before}`", f"`{after}`", False)
        )
    if old.type is new.type and (
        (_by_identity(old) and _by_identity(new))
        or (old.text == new.text and old.type not in _SCALARS)
    ):
        # Compared by identity, or nothing that can be shown changed: either way a new object
        # of the same kind was passed where an equal one was expected.
        return _Difference(
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
    return _Difference(
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


def _array_difference(path: str, old: ArrayLeaf, new: ArrayLeaf) -> _Difference | None:
    change = f"{_describe_array(old)} -> {_describe_array(new)}"
    if old.shape != new.shape:
        return _Difference(
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
        return _Difference("dtype", path, f"`{path}` changed dtype: {change}; {fix}")
    if old.weak_type != new.weak_type:
        return _Difference(
            "weak_type",
            path,
            f"`{path}` changed weak type: {change}; a weakly typed array comes from a Python "
            "scalar, so create it with an explicit dtype (`jnp.asarray(x, dtype=...)`) or store "
            "the hyperparameter with `es.field(dynamic=True)` every time.",
        )
    if old.sharding != new.sharding:
        return _Difference(
            "sharding",
            path,
            f"`{path}` changed sharding: {old.sharding} -> {new.sharding}; place it with the "
            "same sharding every call (`jax.device_put(x, sharding)`).",
        )
    return None


def _leaf_difference(path: str, old: Any, new: Any) -> _Difference | None:
    if type(old) is ArrayLeaf and type(new) is ArrayLeaf:
        return _array_difference(path, old, new)
    if type(old) is StaticLeaf and type(new) is StaticLeaf:
        return None if old.key == new.key else _static_difference(path, old, new)
    was, now = (
        _describe_array(x) if isinstance(x, ArrayLeaf) else _describe_static(x) for x in (old, new)
    )
    scalar = any(type(x) is StaticLeaf and x.type in _SCALARS for x in (old, new))
    kind: MissKind = "weak_type" if scalar else "static"
    return _Difference(
        kind,
        path,
        f"`{path}` switched between an array and a static value: {was} -> {now}; Python "
        "scalars are static (one program per value) while arrays are traced, so pass "
        "`jnp.asarray(value)` every time.",
    )


def _node_differences(path: str, old: Node, new: Node) -> list[_Difference]:
    if old.type is not new.type:
        return [
            _Difference(
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
        _Difference(
            "structure",
            path,
            f"`{path}` ({new.type.__name__}) changed its {what}: {old.data_text} -> "
            f"{new.data_text}; pass arguments of the same structure every call.",
        )
    ]


def _under(path: str, found: list[_Difference]) -> bool:
    """Whether `path` lies inside a node named by a structural difference already found."""
    for d in found:
        if (
            d.kind == "structure"
            and path.startswith(d.path)
            and path[len(d.path) : len(d.path) + 1] in ("[", ".")
        ):
            return True
    return False


def _differences(old: Signature, new: Signature) -> tuple[int, list[_Difference]]:
    """The differences between two signatures and a distance (the number of differences)."""
    old_nodes = dict(old.nodes)
    found: list[_Difference] = []
    structural = False
    for path, node in new.nodes:
        before = old_nodes.pop(path, None)
        if before is None:
            structural = True
            found.append(
                _Difference(
                    "structure",
                    path,
                    f"`{path}` is a new {node.type.__name__} node that the earlier call did not "
                    "have; pass arguments of the same structure every call.",
                )
            )
        else:
            diffs = _node_differences(path, before, node)
            structural = structural or any(d.kind == "structure" for d in diffs)
            found.extend(diffs)
    for path, node in old_nodes.items():
        structural = True
        found.append(
            _Difference(
                "structure",
                path,
                f"`{path}` ({node.type.__name__}) is missing, the earlier call had it; pass "
                "arguments of the same structure every call.",
            )
        )
    old_leaves = dict(old.leaves)
    extra = 0
    for path, leaf in new.leaves:
        before = old_leaves.pop(path, None)
        if before is None:
            structural = True
            if _under(path, found):
                continue  # Inside a node already named as new.
            found.append(
                _Difference(
                    "structure",
                    path,
                    f"`{path}` is an argument that the earlier call did not have; pass "
                    "arguments of the same structure every call.",
                )
            )
            continue
        difference = _leaf_difference(path, before, leaf)
        if difference is not None:
            found.append(difference)
            if type(before) is ArrayLeaf and type(leaf) is ArrayLeaf:
                # A leaf whose shape *and* dtype changed is further than one whose dtype did.
                extra += sum(map(operator.ne, before, leaf)) - 1
    for path in old_leaves:
        structural = True
        if _under(path, found):
            continue  # Inside a node already named as missing.
        found.append(
            _Difference(
                "structure",
                path,
                f"`{path}` is missing, the earlier call had it; pass arguments of the same "
                "structure every call.",
            )
        )
    found.extend(_alias_differences(old.aliases, new.aliases))
    distance = len(found) + extra + (_STRUCTURE_WEIGHT if structural else 0)
    # Structure first (nothing else is comparable then), then in the order of the arguments.
    found.sort(key=lambda d: d.kind != "structure")
    return distance, found


def _alias_differences(old: tuple, new: tuple) -> list[_Difference]:
    """Static objects that were one object in one call and two in the other (`f(g, g)`, then
    `f(g1, g2)`)."""
    found = []
    for aliases, now, before in ((new, "are now", "were"), (old, "were", "are now")):
        other = set(old if aliases is new else new)
        for path, earlier in aliases:
            if (path, earlier) not in other:
                found.append(
                    _Difference(
                        "identity",
                        path,
                        f"`{path}` and `{earlier}` {now} one object and {before} two "
                        "(equivalent, but the function can tell them apart with `is`), so this "
                        "call is traced on its own; pass the same objects the same way each call.",
                    )
                )
    return found


def _config_changes(previous: Sequence[Signature], new: Signature) -> str:
    """The configuration states in which `new` differs from the closest earlier signature it is
    otherwise equal to (the latest on a tie), as `name old -> new`; `""` if none."""
    best: list[str] | None = None
    for old in reversed(previous):
        if old.leaves == new.leaves and len(old.config) == len(new.config):
            changed = [
                f"`{name}` {a!r} -> {b!r}"
                for (name, a), (_, b) in zip(old.config, new.config)
                if not _same_config(a, b)
            ]
            if changed and (best is None or len(changed) < len(best)):
                best = changed
    if not best:
        return ""
    return "; ".join(best[:3]) + ("; ..." if len(best) > 3 else "")


def _same_config(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return a is b


def diff(previous: Sequence[Signature], new: Signature, name: str = "the function") -> Miss:
    """Explains why a call with signature `new` could not reuse any earlier program.

    **Arguments:**

    - `previous`: the signatures of the calls that compiled a program, oldest first.
    - `new`: the signature of the call that missed.
    - `name`: the function's name, for the message.

    **Returns:**

    A [`eqxstable.Miss`][]: kind `"first"` without earlier signatures; otherwise the first
    difference from the closest earlier signature (the one with the fewest differences; the
    latest on a tie), its path, and a reason that also counts any further differences.
    """
    if not previous:
        return Miss("first", "", f"first call of `{name}`: traced and compiled.")
    best: tuple[int, list[_Difference]] | None = None
    for old in reversed(previous):
        distance, found = _differences(old, new)
        if best is None or distance < best[0]:
            best = (distance, found)
    assert best is not None
    _, found = best
    if not found:
        changed = _config_changes(previous, new)
        if changed:
            return Miss(
                "first",
                "",
                f"first call of `{name}` under this JAX configuration ({changed}); JAX traces "
                "and compiles a program for each configuration.",
            )
        return Miss(
            "first",
            "",
            f"`{name}` was compiled again for arguments it has seen before (JAX's own cache no "
            "longer held the program, or JAX traced it in another trace context: a mesh, axis "
            "environment or configuration set around the call).",
        )
    first = found[0]
    reason = first.reason
    if len(found) > 1:
        others = ", ".join(f"`{d.path}`" for d in found[1:4])
        more = "" if len(found) <= 4 else f" and {len(found) - 4} more"
        extra = f"{len(found) - 1} more {'difference' if len(found) == 2 else 'differences'}"
        reason += f" ({extra}: {others}{more}.)"
    return Miss(first.kind, first.path, reason)


def explain_stable_miss(
    name: str,
    rebound: tuple[str, str] | None,
    mutated: tuple | None,
    sig: Signature | None,
    history: list[Signature],
) -> Miss:
    """Why a call of the program of `name` traced: the one explanation of a miss, used by the
    programs and by the doctor's prediction (`eqxstable._doctor._predict`).

    **Arguments:**

    - `name`: the jitted function's name.
    - `rebound`: `(what, advice)` when a value the function reads was rebound after it was
        used (`_State.rebound`), else `None`.
    - `mutated`: the entry's `(index, old key, new key)` when a static argument was changed in
        place after it was used (`Entry.mutated`), else `None`.
    - `sig`: the call's signature, the function's own arrays included; `None` for arguments
        nested too deeply to compare.
    - `history`: the signatures of the program's earlier misses.

    **Returns:**

    The [`eqxstable.Miss`][].
    """
    if rebound is not None:
        what, advice = rebound
        reason = (
            f"{what}, so `{name}` was traced again instead of reusing the program "
            f"compiled before the change; {advice}."
        )
        return Miss("mutated", name, reason)
    if mutated is not None:
        index, old, new = mutated
        path = "(a static field)"
        if index is not None and sig is not None:
            path = sig.leaves[index][0]
        if too_many_objects(new):
            return Miss("identity", path, too_many_reason(path))
        what = describe_change(old, new)
        reason = (
            f"`{path}` is the same object as before, but it was changed in place after it "
            f"was used ({what}), so it was traced again instead of reusing the program "
            "compiled before the change; "
            "pass what changes as an array argument, or keep it unchanged."
        )
        return Miss("mutated", path, reason)
    if sig is None:
        return Miss("first", "", _MSG_UNEXPLAINED.format(name=name))
    # The closest entry is searched among the latest signatures only, so that a function
    # with very many programs does not pay for all of them on each miss.
    return diff(history[-_HISTORY_SEARCHED:], sig, name)
