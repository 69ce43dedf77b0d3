"""Explaining a miss of `equinox.filter_jit`, and whether eqxstable would have avoided it.

Each miss is compared twice with the calls that compiled before it:

1. as eqxstable sees them, with the jit layer's `signature`/`diff` (static values compared by
   `stable_key`, type-exactly). A difference there is a miss eqxstable makes too.
2. as Equinox sees them (static values compared with `==`/`hash`). A call that eqxstable would
   match exactly but Equinox did not is a miss eqxstable avoids: a rebuilt callable, usually.

The other difference runs the opposite way: Equinox lets `1`, `1.0` and `True` share a compiled
program, eqxstable never does. `find_collision` notices a hit that eqxstable would have compiled
separately.
"""

import dataclasses
from typing import Any, NamedTuple

import equinox as eqx
import jax.tree_util as jtu

from .._jit._signature import diff, render_path, short_repr, Signature, signature


_HISTORY = 64


class ObservedMiss(NamedTuple):
    """One miss of an `equinox.filter_jit`, explained.

    - `kind`, `path`, `reason`: as in `eqxstable.Miss`.
    - `avoidable`: whether eqxstable's `filter_jit` would have reused a program here.
    - `compile_seconds`: XLA compile time of this call.
    - `also`: further paths that differ in the same way.
    """

    kind: str
    path: str
    reason: str
    avoidable: bool
    compile_seconds: float
    also: tuple[str, ...] = ()


class Collision(NamedTuple):
    """A hit that Equinox served from a program compiled for an equal-but-different value."""

    path: str
    reason: str


@dataclasses.dataclass
class StaticHistory:
    """What each call that compiled looked like: eqxstable's signature, and the static leaves
    (with Equinox modules' static fields) by path, as Equinox compares them."""

    signatures: list[Signature] = dataclasses.field(default_factory=list)
    statics: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def static_items(args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every non-array leaf, and every static field of an Equinox module, by path."""
    found: dict[str, Any] = {}

    def walk(x: Any, keypath: tuple) -> None:
        children, treedef = jtu.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
        if treedef.num_nodes == 1 and treedef.num_leaves == 1:
            if not eqx.is_array(x):
                found[render_path(keypath)] = x
            return
        if isinstance(x, eqx.Module):
            # What the instance stores is what Equinox compares (a `StableModule`'s attribute
            # reads give the value as assigned instead).
            stored = x.__dict__
            for field in dataclasses.fields(x):
                if field.metadata.get("static", False):
                    value = stored.get(field.name, getattr(x, field.name, None))
                    found[f"{render_path(keypath)}.{field.name}"] = value
        for child_path, child in children:
            walk(child, keypath + tuple(child_path))

    walk((args, kwargs), ())
    return found


def _same_for_equinox(a: Any, b: Any) -> bool:
    # As a dict lookup (which is how JAX finds a static argument) compares keys.
    if a is b:
        return True
    try:
        return hash(a) == hash(b) and bool(a == b)
    except Exception:
        return False


def _equinox_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    if old.keys() != new.keys():
        return []
    return [path for path, value in new.items() if not _same_for_equinox(old[path], value)]


def _describe(obj: Any) -> str:
    code = getattr(obj, "__code__", None)
    if code is None:
        return short_repr(obj)
    where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
    return f"`{getattr(obj, '__qualname__', '?')}` defined at {where}"


def _avoidable(path: str, old: Any, new: Any, also: list[str]) -> tuple[str, str]:
    by_identity = type(old) is type(new) and type(new).__eq__ is object.__eq__
    kind = "identity" if by_identity else "static"
    how = "by identity" if by_identity else "with `==`"
    more = f" (also {', '.join(f'`{p}`' for p in also[:3])})" if also else ""
    reason = (
        f"`{path}`{more} is compared {how} by `equinox.filter_jit`, and a new but equivalent "
        f"{type(new).__name__} was passed ({_describe(new)}); eqxstable's `filter_jit` keys it "
        "by what it computes and would have reused the program. Or build it once and reuse it."
    )
    return kind, reason


def explain_miss(
    history: StaticHistory,
    name: str,
    args: tuple,
    kwargs: dict,
    compile_seconds: float,
    new_cache: bool,
) -> ObservedMiss:
    """Explains one miss and adds the call to `history`."""
    sig = signature(args, kwargs)
    statics = static_items(args, kwargs)
    try:
        return _explain(history, name, sig, statics, compile_seconds, new_cache)
    finally:
        history.signatures.append(sig)
        history.statics.append(statics)
        # Each miss is compared with every earlier one, so a script that compiles thousands of
        # times would slow down quadratically; the most recent calls explain a miss best.
        del history.signatures[:-_HISTORY], history.statics[:-_HISTORY]


def _explain(
    history: StaticHistory,
    name: str,
    sig: Signature,
    statics: dict[str, Any],
    compile_seconds: float,
    new_cache: bool,
) -> ObservedMiss:
    if not history.signatures:
        return ObservedMiss(
            "first", "", f"first call of `{name}`: traced and compiled.", False, compile_seconds
        )
    miss = diff(history.signatures, sig, name)
    if miss.kind != "first":
        return ObservedMiss(miss.kind, miss.path, miss.reason, False, compile_seconds)
    if new_cache:
        reason = (
            f"`equinox.filter_jit` was applied to a new `{name}` object, equivalent to one it "
            "compiled before; each function object gets its own Equinox cache, while eqxstable's "
            "`filter_jit` shares one program between equivalent functions. Or wrap it once, "
            "outside the loop."
        )
        return ObservedMiss("identity", "(the jitted function)", reason, True, compile_seconds)
    # The latest earlier call that eqxstable would have matched exactly (usually the last one):
    # what differs there for Equinox is why it missed.
    for i in reversed(range(len(history.signatures))):
        if diff([history.signatures[i]], sig, name).kind != "first":
            continue
        found = _equinox_differences(history.statics[i], statics)
        if not found:
            break
        path = found[0]
        kind, reason = _avoidable(path, history.statics[i][path], statics[path], found[1:])
        return ObservedMiss(kind, path, reason, True, compile_seconds, tuple(found[1:]))
    return ObservedMiss("first", "", miss.reason, False, compile_seconds)


def find_collision(history: StaticHistory, args: tuple, kwargs: dict) -> Collision | None:
    """For a hit whose static values have types not seen on a miss: the path where eqxstable
    would have compiled a separate program, or `None`."""
    if not history.signatures:
        return None
    miss = diff(history.signatures, signature(args, kwargs))
    if miss.kind == "first":
        return None
    change = miss.reason.split(";", 1)[0]
    reason = (
        f"Equinox served a program compiled for an equal (`==`) value of another type "
        f"({change}); eqxstable keys values type-exactly and would compile it separately, "
        "and Equinox's result may have the wrong dtype."
    )
    return Collision(miss.path, reason)
