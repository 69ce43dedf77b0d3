"""Explaining a miss of `equinox.filter_jit`, and what eqxstable's `filter_jit` would have done.

Whether eqxstable would have made a miss is predicted in `_predict.py`, by the jit layer's own
cache. This file puts it in words. A miss that eqxstable makes too is explained as Equinox saw it:
the jit layer's `signature`/`diff` against the calls that compiled before. A miss that eqxstable
avoids is explained by what Equinox compared differently: a static value that is equivalent for
`stable_key` but not `==` (or not the same object) for Equinox, usually a rebuilt callable. A hit
of Equinox that eqxstable would have compiled (`1` served the program of `1.0`; a global the
function reads was changed) is an *added* miss, explained with eqxstable's predicted reason.
"""

import dataclasses
from typing import Any, NamedTuple

import equinox as eqx
import jax.tree_util as jtu

from .._jit import argument_path, diff, Miss, short_repr, Signature
from ._jax_caches import is_in_another_context


_HISTORY = 64


class ObservedMiss(NamedTuple):
    """One miss of an `equinox.filter_jit`, explained.

    - `kind`, `path`, `reason`: as in `eqxstable.Miss`.
    - `avoidable`: whether eqxstable's `filter_jit` would have reused a program here.
    - `compile_seconds`: XLA compile time of this call.
    - `also`: further paths that differ in the same way.
    - `traced`: whether the function was traced (else JAX compiled a program it derived from an
      earlier trace, such as a gradient's): what `@pytest.mark.max_traces` counts.
    - `compiled`: whether it compiled a program (not when it was traced inside another trace, an
      outer `jax.jit`, which compiled nothing of this one's, or when its trace raised).
    """

    kind: str
    path: str
    reason: str
    avoidable: bool
    compile_seconds: float
    also: tuple[str, ...] = ()
    traced: bool = True
    compiled: bool = True


class AddedMiss(NamedTuple):
    """A hit of Equinox's cache where eqxstable's `filter_jit` would have compiled: `kind` and
    `path` as in `eqxstable.Miss`, `reason` says what Equinox reused and why eqxstable would
    not."""

    kind: str
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
                found[argument_path(keypath)] = x
            return
        if isinstance(x, eqx.Module):
            # What the instance stores is what Equinox compares (a `StableModule`'s attribute
            # reads give the value as assigned instead).
            stored = x.__dict__
            for field in dataclasses.fields(x):
                if field.metadata.get("static", False):
                    value = stored.get(field.name, getattr(x, field.name, None))
                    found[f"{argument_path(keypath)}.{field.name}"] = value
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
    sig: Signature,
    args: tuple,
    kwargs: dict,
    compile_seconds: float,
    new_cache: bool,
    predicted: Miss | None,
    avoidable: bool,
) -> ObservedMiss:
    """Explains one miss of Equinox and adds the call to `history`.

    **Arguments:**

    - `history`: the calls of this function that compiled before.
    - `name`: the function's name.
    - `sig`: the call's `signature`.
    - `args`, `kwargs`: the call's arguments.
    - `compile_seconds`: XLA compile time of this call.
    - `new_cache`: whether this is the first call of a new Equinox cache (a new wrapper).
    - `predicted`: the miss eqxstable's `filter_jit` would have made, or `None`.
    - `avoidable`: whether eqxstable's `filter_jit` would have reused a program here (`False`
        also when the prediction failed).
    """
    statics = static_items(args, kwargs)
    try:
        if avoidable:
            return _avoided(history, name, sig, statics, compile_seconds, new_cache)
        return _made_too(history, name, sig, statics, compile_seconds, predicted)
    finally:
        history.signatures.append(sig)
        history.statics.append(statics)
        # Each miss is compared with every earlier one, so a script that compiles thousands of
        # times would slow down quadratically; the most recent calls explain a miss best.
        del history.signatures[:-_HISTORY], history.statics[:-_HISTORY]


def _made_too(
    history: StaticHistory,
    name: str,
    sig: Signature,
    statics: dict[str, Any],
    compile_seconds: float,
    predicted: Miss | None,
) -> ObservedMiss:
    if not history.signatures:
        return ObservedMiss(
            "first", "", f"first call of `{name}`: traced and compiled.", False, compile_seconds
        )
    miss = diff(history.signatures, sig, name)
    if miss.kind == "first" and predicted is not None and predicted.kind != "first":
        # Nothing differs in the arguments: what differs is what eqxstable also watches (a
        # global the function reads, a static changed in place).
        miss = predicted
    elif miss.kind == "first" and predicted is not None and is_in_another_context(predicted):
        # Nothing differs in the arguments either: JAX traced again in another trace context.
        miss = predicted
    reason = miss.reason
    found = _equinox_differences(history.statics[-1], statics) if history.statics else []
    if found and miss.kind in ("static", "identity"):
        # What made Equinox miss comes first: it compares a new function object by identity,
        # whatever it computes; why eqxstable would miss as well comes after.
        old, new = history.statics[-1][found[0]], statics[found[0]]
        if type(old) is type(new) and type(new).__eq__ is object.__eq__:
            more = f" (also {', '.join(f'`{p}`' for p in found[1:4])})" if found[1:] else ""
            reason = (
                f"`{found[0]}`{more} is a new {type(new).__name__} object, which "
                "`equinox.filter_jit` compares by identity; eqxstable's `filter_jit` would "
                f"compile too, since it computes something else: {reason}"
            )
    return ObservedMiss(miss.kind, miss.path, reason, False, compile_seconds)


def _avoided(
    history: StaticHistory,
    name: str,
    sig: Signature,
    statics: dict[str, Any],
    compile_seconds: float,
    new_cache: bool,
) -> ObservedMiss:
    if new_cache:
        reason = (
            f"`equinox.filter_jit` was applied to a new `{name}` object, equivalent to one it "
            "compiled before; Equinox compiles again for a function that is not the same object "
            "(a callable object: not `==`), while eqxstable's `filter_jit` shares one program "
            "between equivalent functions. Or wrap it once, outside the loop."
        )
        return ObservedMiss("identity", "(the jitted function)", reason, True, compile_seconds)
    # The latest earlier call that eqxstable would have matched exactly (usually the last one):
    # what differs there for Equinox is why it missed.
    for i in reversed(range(len(history.signatures))):
        if diff([history.signatures[i]], sig, name).kind != "first":
            continue
        found = _equinox_differences(history.statics[i], statics)
        if not found:
            continue
        path = found[0]
        kind, reason = _avoidable(path, history.statics[i][path], statics[path], found[1:])
        return ObservedMiss(kind, path, reason, True, compile_seconds, tuple(found[1:]))
    reason = (
        f"`equinox.filter_jit` traced `{name}` again for arguments equivalent to those of an "
        "earlier compile; eqxstable's `filter_jit` would have reused that program."
    )
    return ObservedMiss("identity", "", reason, True, compile_seconds)


def added_miss(predicted: Miss) -> AddedMiss:
    """Words for a hit of Equinox that eqxstable's `filter_jit` would have compiled."""
    kind, path = predicted.kind, predicted.path
    if kind == "static":
        change = predicted.reason.split(";", 1)[0]
        reason = (
            f"Equinox reused the program compiled for an equal (`==`) value ({change}); eqxstable "
            "keys values exactly (`1`, `1.0` and `True` differ) and would compile it separately, "
            "so Equinox's result may have the wrong dtype."
        )
    elif kind == "mutated":
        what = predicted.reason.split(", so ", 1)[0]
        advice = predicted.reason.rsplit("before the change; ", 1)[-1].rstrip(".")
        reason = (
            f"{what}, yet Equinox reused the program traced before, which may compute with the "
            f"old value; eqxstable's `filter_jit` would trace again ({advice})."
        )
    elif kind == "identity":
        reason = (
            f"Equinox reused the program compiled for an equal (`==`) object at `{path}`; "
            "eqxstable compares it by identity (it could change later) and would compile again."
        )
    else:
        reason = f"Equinox reused a program here; eqxstable would compile: {predicted.reason}"
    return AddedMiss(kind, path, reason)
