"""JAX's part of the prediction: what JAX's trace and compile caches hold under one shadow entry.

Under one cache entry of eqxstable's `filter_jit`, JAX keeps a program per set of array types:
traced once per types (shape, dtype, weak type) and compiled once per types and placement at top
level, each under JAX's trace context (configuration, mesh, axis environment). A call under a
transformation (an outer `jax.jit`, `grad`, `vmap`) only traces; JAX's own derived programs (a
JVP, a batched jaxpr) are no misses, and neither is the first top-level compile of what a
transformed call traced (`Program.untraced_miss`). The functions here read and update a
`_predict.ShadowProgram`'s `seen`, `traced` and `traced_abstract`.
"""

from collections.abc import Hashable
from typing import Any

from .._jit import ArrayLeaf, Miss, trace_context
from ._reuse import ShadowToken


def context() -> Hashable:
    """JAX's trace context now (the configuration, mesh and axis environment JAX keys its own
    caches by, `trace_context`), or `None` where this JAX does not give it."""
    try:
        return trace_context()
    except Exception:  # pragma: no cover - a JAX without it: calls are told apart by types.
        return None


def in_another_context(name: str) -> str:
    """The reason of a miss that JAX traced again only because its trace context changed."""
    return (
        f"`{name}` was traced again for argument types it was traced for before, under another "
        "JAX trace context (JAX keys its caches by the mesh, axis environment and configuration "
        "around a call, and sets an enclosing jitted function's own mesh while it transforms "
        "that function, as `jax.grad` does when it traces a `custom_jvp` rule that calls "
        f"`{name}`): JAX traces it again under eqxstable's `filter_jit` as under "
        "`equinox.filter_jit`."
    )


def is_in_another_context(miss: Miss) -> bool:
    """Whether `miss` is a trace again only for another trace context (`in_another_context`)."""
    return miss.kind == "first" and "under another JAX trace context" in miss.reason


def detaches(program: Any, entry: Any, context: Hashable, avals: tuple[ArrayLeaf, ...]) -> bool:
    """Whether a call under a transformation is a miss because its entry is a guest: it ran a
    program compiled for another entry's equal trace, and a guest called under a transformation
    detaches to the token its own first trace ran under (`eqxstable._jit._token.Guest.own`),
    where JAX's trace cache holds that trace: the types it traced then are no new trace (the
    entry's `traced`), any others are. At top level the entry still runs the shared program for
    the types it ran it for (`eqxstable._jit._token.Split`: `seen` keeps them)."""
    token = program.tokens.get(entry)
    if token is None or token.target is None:
        return False
    program.tokens[entry] = ShadowToken()
    types = (context, tuple(leaf[:3] for leaf in avals))
    traced = program.traced.setdefault(entry, set())
    if types in traced:
        return False
    traced.add(types)
    program.traced_abstract.add(entry)
    return True


def in_other_context(
    program: Any, entry: Any, context: Hashable, avals: tuple[ArrayLeaf, ...]
) -> bool:
    """Whether JAX traced this entry for these array types before, in another trace context."""
    types = tuple(leaf[:3] for leaf in avals)
    return any(c != context and t == types for c, t in program.traced.get(entry, ()))


def counts(
    program: Any, entry: Any, context: Hashable, avals: tuple[ArrayLeaf, ...], abstract: bool
) -> bool:
    """Whether a call with these array types is a miss of the stable program, as JAX's caches
    and `Program` count it (and notes what JAX now holds). Under a transformation (`abstract`:
    a tracer among them) JAX traces the function once per types and compiles only programs of
    its own (a JVP, a batched jaxpr), which are not misses. At top level it compiles once per
    types and placement, tracing only types it has not traced yet; the first compile of what
    a transformed call traced (and counted) is not a miss either (`Program.untraced_miss`).

    JAX keys both caches by its trace context too (`context`): equal types under another mesh,
    axis environment or configuration trace again. JAX sets an enclosing jitted function's own
    mesh while it transforms that function's jaxpr, so a `custom_jvp` rule that `jax.grad` of
    an outer `filter_jit` traces calls this function again in another context than the outer
    trace did (optimistix's implicit solves, lineax's `linear_solve` in them)."""
    types = (context, tuple(leaf[:3] for leaf in avals))
    placed = (context, avals)
    traced = program.traced.setdefault(entry, set())
    if abstract:
        if types in traced:
            return False
        traced.add(types)
        program.traced_abstract.add(entry)
        return True
    seen = program.seen.setdefault(entry, set())
    if placed in seen:
        return False
    seen.add(placed)
    if types in traced and entry in program.traced_abstract:
        program.traced_abstract.discard(entry)
        return False
    traced.add(types)
    program.traced_abstract.discard(entry)
    return True
