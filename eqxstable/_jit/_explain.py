"""Why a call missed, in words: the one explanation of a miss.

[`explain_stable_miss`][] names a value the function reads that was rebound, or a static argument
changed in place; otherwise [`diff`][] compares the call's signature (`_signature.py`) with the
earlier ones, picks the closest (fewest differences) and returns the `Miss` naming the first
difference, with advice that fits it.

This runs only on a miss, so it favours clear output over speed. It is the internal API the tools
(`eqxstable doctor`) build on, through the layer's door.
"""

import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._keys import too_many_objects
from .._keys._fallbacks import TOO_MANY
from ._accounting import Miss
from ._ambient import ambient_reason
from ._describe import describe_change
from ._difference import (
    Difference,
    leaf_difference,
    node_differences,
    SAME_STRUCTURE,
    too_many_reason,
)
from ._signature import ArrayLeaf, Signature


# A different pytree structure makes the leaves incomparable, so such an entry is "further" than
# any entry with the same structure.
_STRUCTURE_WEIGHT = 1_000_000
# The closest entry is searched among the latest signatures only (`explain_stable_miss`).
_HISTORY_SEARCHED = 64
_MSG_UNEXPLAINED = (
    "`{name}` compiled for arguments nested too deeply to compare with earlier calls."
)


def _under(path: str, roots: set[str]) -> bool:
    """Whether `path` lies inside a node named by a structural difference already found (its
    path in `roots`): each prefix of `path` ending before a `[` or `.` looked up, so a miss with
    12,000 leaves on one side only costs what its paths are long, not 12,000 squared."""
    return any(path[:i] in roots for i, c in enumerate(path) if c == "[" or c == ".")


def _pair(
    old: dict[str, Any],
    new: Sequence[tuple[str, Any]],
    found: list[Difference],
    compare: Callable[[str, Any, Any], list[Difference]],
    added: Callable[[str, Any], str],
    missing: Callable[[str, Any], str],
    inside_found: bool,
) -> bool:
    """Pairs the parts of two signatures by path (nodes or leaves): `compare` for each pair, and
    a structural difference for a part only one side has, worded by `added` or `missing` (none,
    with `inside_found`, for a part inside a node already named). Appends to `found`, empties
    `old`, and returns whether the structure differs."""
    structural = False
    roots = {d.path for d in found if d.kind == "structure"}
    for path, part in new:
        before = old.pop(path, None)
        if before is None:
            structural = True
            if not (inside_found and _under(path, roots)):
                found.append(Difference("structure", path, added(path, part)))
                roots.add(path)
        else:
            diffs = compare(path, before, part)
            for d in diffs:
                if d.kind == "structure":
                    structural = True
                    roots.add(d.path)
            found.extend(diffs)
    for path, part in old.items():
        structural = True
        if not (inside_found and _under(path, roots)):
            found.append(Difference("structure", path, missing(path, part)))
            roots.add(path)
    return structural


def _differences(old: Signature, new: Signature) -> tuple[int, list[Difference]]:
    """The differences between two signatures and a distance (the number of differences)."""
    found: list[Difference] = []
    structural = _pair(
        dict(old.nodes),
        new.nodes,
        found,
        node_differences,
        lambda path, node: (
            f"`{path}` is a new {node.type.__name__} node that the earlier call did not "
            f"have; {SAME_STRUCTURE}"
        ),
        lambda path, node: (
            f"`{path}` ({node.type.__name__}) is missing, the earlier call had it; {SAME_STRUCTURE}"
        ),
        inside_found=False,
    )
    extra = 0

    def leaf_differences(path: str, before: Any, leaf: Any) -> list[Difference]:
        nonlocal extra
        difference = leaf_difference(path, before, leaf)
        if difference is None:
            return []
        if type(before) is ArrayLeaf and type(leaf) is ArrayLeaf:
            # A leaf whose shape *and* dtype changed is further than one whose dtype did.
            extra += sum(map(operator.ne, before, leaf)) - 1
        return [difference]

    # A leaf inside a node already named as new or missing is not named again.
    structural |= _pair(
        dict(old.leaves),
        new.leaves,
        found,
        leaf_differences,
        lambda path, _: (
            f"`{path}` is an argument that the earlier call did not have; " + SAME_STRUCTURE
        ),
        lambda path, _: f"`{path}` is missing, the earlier call had it; " + SAME_STRUCTURE,
        inside_found=True,
    )
    found.extend(_alias_differences(old.aliases, new.aliases))
    distance = len(found) + extra + (_STRUCTURE_WEIGHT if structural else 0)
    # Structure first (nothing else is comparable then), then in the order of the arguments.
    found.sort(key=lambda d: d.kind != "structure")
    return distance, found


def _alias_differences(old: tuple, new: tuple) -> list[Difference]:
    """Static objects that were one object in one call and two in the other (`f(g, g)`, then
    `f(g1, g2)`)."""
    found = []
    for aliases, now, before in ((new, "are now", "were"), (old, "were", "are now")):
        other = set(old if aliases is new else new)
        for path, earlier in aliases:
            if (path, earlier) not in other:
                found.append(
                    Difference(
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


def _x64_widths(old: Signature, new: Signature, found: list[Difference]) -> bool:
    """Whether each dtype difference is only the width `jax_enable_x64` picks (`float32` and
    `float64`, `int32` and `int64`, ...): the same kind of number."""
    olds, news = dict(old.leaves), dict(new.leaves)
    for d in found:
        a, b = getattr(olds.get(d.path), "dtype", None), getattr(news.get(d.path), "dtype", None)
        try:
            a, b = np.dtype(a), np.dtype(b)
        except TypeError:
            return False
        if a.kind != b.kind or {a.itemsize, b.itemsize} not in ({4, 8}, {8, 16}):
            return False
    return True


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
    best: tuple[int, list[Difference], Signature] | None = None
    # The earlier signatures nothing differs from (an equivalent new object is no difference).
    equal = []
    for old in reversed(previous):
        distance, found = _differences(old, new)
        if not found:
            equal.append(old)
        if best is None or distance < best[0]:
            best = (distance, found, old)
    assert best is not None
    _, found, closest = best
    if found and all(d.kind == "dtype" for d in found) and _x64_widths(closest, new, found):
        # The same arguments read under another `jax_enable_x64` (a float64 NumPy array is
        # float32 without it): the configuration changed, which no cast avoids.
        changed = _config_changes([closest], dataclasses.replace(new, leaves=closest.leaves))
        if changed:
            dtypes = found[0].reason.split("changed dtype: ", 1)[-1].split(";")[0]
            return Miss(
                "first",
                "",
                f"first call of `{name}` under this JAX configuration ({changed}), which "
                f"changed the dtypes JAX gives the arguments (`{found[0].path}` {dtypes}"
                f"{'' if len(found) == 1 else ', ...'}); JAX traces and compiles a program for "
                "each configuration.",
            )
    if not found:
        changed = _config_changes(previous, new)
        if changed:
            return Miss(
                "first",
                "",
                f"first call of `{name}` under this JAX configuration ({changed}); JAX traces "
                "and compiles a program for each configuration.",
            )
        reason = ambient_reason(equal, new, name)
        if reason:
            return Miss("first", "", reason)
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
    rebound: tuple[str, Any] | None,
    mutated: tuple | None,
    sig: Signature | None,
    history: list[Signature],
    unpinned: tuple | None = None,
) -> Miss:
    """Why a call of the program of `name` traced: the one explanation of a miss, used by the
    programs and by the doctor's prediction (`eqxstable._doctor._predict`).

    **Arguments:**

    - `name`: the jitted function's name.
    - `rebound`: `(what, advice)` when a value the function reads was rebound after it was
        used (`_State.rebound`), `(TOO_MANY, its new key)` when the function reaches too many
        objects to key, else `None`.
    - `mutated`: the entry's `(index, old key, new key)` when a static argument was changed in
        place after it was used (`Entry.mutated`), else `None`.
    - `sig`: the call's signature, the function's own arrays included; `None` for arguments
        nested too deeply to compare.
    - `history`: the signatures of the program's earlier misses.
    - `unpinned`: `(path, old, new)` when the call passed objects equivalent to those of a
        program that calls Python while it runs (`_pinned.py`), which serves only its own: the
        path of the first new object (`None` for the function itself, `""` where it is not
        found) and the two objects' texts; else `None`.

    **Returns:**

    The [`eqxstable.Miss`][].
    """
    if rebound is not None:
        what, advice = rebound
        if what == TOO_MANY:
            # The function's own key past the object budget (`_State.refresh`): nothing was
            # rebound, its key equals nothing. `advice` is then the key.
            return Miss("identity", name, too_many_reason(name, advice))
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
            return Miss("identity", path, too_many_reason(path, new))
        what = describe_change(old, new)
        reason = (
            f"`{path}` is the same object as before, but it was changed in place after it "
            f"was used ({what}), so it was traced again instead of reusing the program "
            "compiled before the change; "
            "pass what changes as an array argument, or keep it unchanged."
        )
        return Miss("mutated", path, reason)
    if unpinned is not None:
        return _unpinned_miss(name, unpinned)
    if sig is None:
        return Miss("first", "", _MSG_UNEXPLAINED.format(name=name))
    # The closest entry is searched among the latest signatures only, so that a function
    # with very many programs does not pay for all of them on each miss.
    return diff(history[-_HISTORY_SEARCHED:], sig, name)


def after_failed_trace(miss: Miss, name: str, failed: list[Signature], sig: Signature) -> Miss:
    """`miss`, the miss of a call of `name` that no compiled program preceded, as it reads when
    traces before it raised (`failed`, their signatures): not a first call, but a trace again
    after a trace that compiled nothing, named by what differs from the closest of them."""
    if miss.kind != "first" or miss.reason != f"first call of `{name}`: traced and compiled.":
        return miss
    found = diff(failed, sig, name)
    before = f"`{name}` was traced before, but that trace raised and compiled nothing"
    if found.kind == "first" and "seen before" in found.reason:
        # Nothing differs from a call whose trace raised (a function fixed in place, a retry).
        return Miss("first", "", f"{before}; this call has the same arguments as that one.")
    change = found.reason.split("; ", 1)[0].rstrip(".")
    return Miss("first", "", f"{before}; this call differs from that one: {change}.")


_PINNED = (
    "but the program compiled for that one calls Python while it runs (a host callback: "
    "`jax.pure_callback`, `io_callback`, `jax.debug.callback`), so it serves only the very objects "
    "that traced it and this call was traced on its own; pass the same object every call (build "
    "it once and reuse it)."
)


_MADE = (
    "but the output of the program traced for that one holds an object its trace made (neither "
    "an immutable value nor one of the call's own static inputs: a plain object, a `set`), which "
    "only the very objects that traced it are served, as by `equinox.filter_jit`, so this call "
    "was traced on its own and gets a fresh one (running the program compiled for that one where "
    "the two traces are equal); pass the same object every call to be served the same output "
    "object."
)


def _unpinned_miss(name: str, unpinned: tuple) -> Miss:
    """The miss of a call whose objects are equivalent to those of a pinned entry (the same key),
    but other objects: `unpinned` is `(path, old, new, why)` (`why`: `Entry.pinned_by`)."""
    path, old, new, *why = unpinned
    pinned = _MADE if why == ["output"] else _PINNED
    if path is None:
        reason = (
            f"`{name}` is a new function object equivalent to the one an earlier call jitted (or "
            f"holds new equivalent static parts), {pinned}"
        )
        return Miss("identity", name, reason)
    what = f"`{path}` is" if path else "a static field of a module argument holds"
    reason = (
        f"{what} a new object equivalent to the one an earlier call passed ({old} -> {new}), "
        + pinned
    )
    return Miss("identity", path, reason)
