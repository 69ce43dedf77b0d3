"""What eqxstable's `filter_jit` would do with the calls an `equinox.filter_jit` receives.

The prediction is not a model of eqxstable written a second time: each call is bound and looked up
in the jit layer's own `Cache` (the identity fast path, the `Watch` and the `stable_key` slow path
of the hit path, `Cache.rekey` after a trace), the jitted function is watched with the keys
layer's own `compute` and `Watch` as a stable wrapper watches it, programs are shared between
equivalent functions by the jit layer's `static_key` as `get_program` shares them (and aliased
after a trace as `alias_program` does), and a predicted miss is explained by the jit layer's
own `explain_stable_miss`, the code that explains a real one. What is left to this file is JAX's
part: under one cache entry, a program per set of array types (shape, dtype, weak type,
placement), the function's own arrays included; and, as `_jit._reuse` decides, whether a miss
runs a program already compiled for an equal trace (the fingerprint is `_reuse.py`'s).

The shadow programs are the doctor's own: sharing the jit layer's table would put the observed
script's calls into the caches of the stable wrappers it makes itself.
`tests/test_doctor_prediction.py` runs every example both ways and checks that `--stabilize` does
what was predicted.
"""

import dataclasses
import itertools
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import jax.tree_util as jtu
from jax.core import Tracer

from .._jit import (
    array_leaf as _array_leaf,
    ArrayLeaf,
    Binder,
    Cache,
    describe_change,
    Entry,
    explain_stable_miss,
    fun_names,
    FunParts,
    Miss,
    not_compiled,
    rebound_advice,
    Signature,
    signature,
    split_fun,
    static_key,
    trace_context,
    under_a_trace,
)
from .._keys import compute, Key, Watch


# `ShadowWrapper.pair` once its calls used more than one (program, entry).
_MANY: Any = object()
# What `--stabilize` passes on as `eqxstable.filter_jit(fun, donate=...)`, as Equinox's wrapper
# holds it: `(donate_first, donate_rest)` -> the leaves a stable program donates (its key).
_DONATED = {
    (True, True): "all",
    (False, True): "all-except-first",
    (False, False): "none",
    (True, False): "none",
}


def _context() -> Hashable:
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


def donated(options: tuple) -> str:
    """Which leaves eqxstable's `filter_jit` donates for an Equinox wrapper with these options
    (`donate_first`, `donate_rest`, `filter_warning`): part of a program's key."""
    return _DONATED.get((bool(options[0]), bool(options[1])), repr(options))


class ShadowToken:
    """As `eqxstable._jit._token.Token` (or a `Guest` of one, `target`): how many traces an
    entry's own program had, and how many other entries run (or ran) it."""

    __slots__ = ("traces", "guests", "target")

    def __init__(self, target: "ShadowToken | None" = None):
        self.traces = 1
        self.guests = 0
        self.target = target


class ShadowProgram:
    """One program of eqxstable's `filter_jit`, without the compiling: its cache of entries, the
    array types each entry was compiled for (`seen`, placement included) and traced for
    (`traced`: shape, dtype and weak type, JAX's trace cache), each with JAX's trace context,
    the entries whose latest miss was a trace under a transformation (as
    `Program.traced_abstract`), the signature of each miss, and each entry's token."""

    __slots__ = ("key", "cache", "bind", "seen", "traced", "traced_abstract", "history", "tokens")

    def __init__(self, key: Any, fun: Any, which: str):
        self.key = key
        self.cache = Cache(which)
        self.bind = Binder(fun)
        self.seen: dict[Entry, set[tuple]] = {}
        self.traced: dict[Entry, set[tuple]] = {}
        self.traced_abstract: set[Entry] = set()
        self.history: list[Signature] = []
        self.tokens: dict[Entry, ShadowToken] = {}


class ShadowWrapper:
    """What a stable wrapper of one Equinox wrapper's function would hold (as `_jit._wrapper`'s
    `_State`): the key and `Watch` of its function, its program, and what changed in the
    function since the last call."""

    __slots__ = (
        "fun",
        "parts",
        "which",
        "paths",
        "fun_key",
        "fun_watch",
        "program",
        "calls",
        "pair",
    )

    fun_key: Key
    fun_watch: Watch

    def __init__(self, fun: Any, parts: FunParts, which: str, program: ShadowProgram):
        self.fun = fun
        self.parts = parts
        self.which = which
        # The paths of the function's arrays: they are arguments of the program (`fun.weight`).
        self.paths: list[str] | None = None
        self.program = program
        self.calls = 0
        # The one (program, entry) every call used so far, or `_MANY`: while it is one, a call
        # that Equinox served from its cache was compiled for under that entry too.
        self.pair: Any = None
        self.resnapshot()

    def resnapshot(self) -> None:
        self.fun_key, self.fun_watch = compute(self.fun)

    def array_paths(self) -> list[str]:
        if self.paths is None:
            flat = jtu.tree_flatten_with_path(self.fun)[0]
            self.paths = [
                f"fun{jtu.keystr(path)}" for (path, _), m in zip(flat, self.parts.mask) if m
            ]
        return self.paths


class Decision(NamedTuple):
    """Where eqxstable's `filter_jit` would look one call up, decided before the call runs: the
    call bound and flattened as a stable wrapper flattens it."""

    wrapper: ShadowWrapper
    program: ShadowProgram
    entry: Entry
    rebound: tuple[str, str] | None
    args: tuple
    kwargs: dict
    leaves: list
    # JAX's trace context around the call: JAX traces and compiles once per context too.
    context: Hashable


class Predictor:
    """The programs eqxstable would share between wrappers of equivalent functions (by the
    jit layer's `static_key`, as `get_program` shares them), and the per-call decisions."""

    def __init__(self):
        self.programs: dict[Any, ShadowProgram] = {}
        # As `eqxstable._jit._reuse._by_fingerprint`: tokens by the fingerprint of their trace.
        self.fingerprints: dict[Hashable, ShadowToken] = {}
        # Compiles with no miss of their own (`CacheInfo.compiles`): the first call at the top
        # level of what a call traced only under a transformation.
        self.late = 0

    def wrapper(self, fun: Any, options: tuple) -> ShadowWrapper:
        """A shadow of the stable wrapper that `--stabilize` would make of `fun` with Equinox's
        `options` (`donate_first`, `donate_rest`, `filter_warning`)."""
        parts = split_fun(fun)
        which = donated(options)
        return ShadowWrapper(fun, parts, which, self._program(fun, parts, which))

    def _program(self, fun: Any, parts: FunParts, which: str) -> ShadowProgram:
        # As `get_program`: the options passed on are the donation mode only.
        key = static_key(fun, parts, which, ())
        program = self.programs.get(key)
        if program is None:
            program = self.programs[key] = ShadowProgram(key, fun, which)
        return program

    def before(self, wrapper: ShadowWrapper, args: tuple, kwargs: dict) -> Decision:
        """The program and entry of this call, as a stable wrapper finds them before calling
        JAX: it first checks whether its function changed since the last call (`_State.refresh`),
        then binds and flattens the arguments and looks them up."""
        rebound = None
        if not wrapper.fun_watch.valid():
            old = wrapper.fun_key
            key, wrapper.fun_watch = compute(wrapper.fun)
            if key != old:
                wrapper.program = self._program(wrapper.fun, wrapper.parts, wrapper.which)
                if wrapper.calls:
                    what = describe_change(old, key)
                    name = fun_names(wrapper.fun)[1]
                    rebound = (
                        f"`{name}` had a value it reads rebound after it was used ({what})",
                        rebound_advice(old, key),
                    )
                wrapper.fun_key = key
        program = wrapper.program
        if kwargs:
            args, kwargs = program.bind(args, kwargs)
        leaves, treedef = jtu.tree_flatten((args, kwargs))
        entry = program.cache.lookup(leaves, treedef)
        return Decision(wrapper, program, entry, rebound, args, kwargs, leaves, _context())

    def settle(self, decision: Decision, traced: bool) -> bool:
        """Notes that the call ran (`traced`: whether Equinox traced or compiled for it).
        Returns `True` when eqxstable surely hit too, without keying anything; else `miss`
        decides."""
        wrapper, program, entry = decision[:3]
        wrapper.calls += 1
        pair = (program, entry)
        if wrapper.pair is None:
            wrapper.pair = pair
        elif wrapper.pair is not _MANY and wrapper.pair != pair:
            wrapper.pair = _MANY
        if traced:
            # What tracing changed in the function or its arguments (a trace counter) is part of
            # the program, not a later change: a stable wrapper looks again after its traces
            # (`Cache.rekey`, `_State.traced`, `alias_program`).
            program.cache.rekey(entry)
            wrapper.resnapshot()
            key = static_key(wrapper.fun, wrapper.parts, wrapper.which, ())
            if key != program.key:
                self.programs.setdefault(key, program)
            return False
        # Equinox reused a program compiled for these array types, and every call of this
        # wrapper so far used this one entry: eqxstable compiled for them under it too.
        return entry in program.seen and wrapper.pair is not _MANY

    def first_trace(self, decision: Decision) -> bool:
        """Whether a miss of this call would be its entry's first trace, the only one that
        looks for a compiled program to reuse (`eqxstable._jit._reuse.first_call`)."""
        return decision.entry not in decision.program.tokens

    def miss(
        self,
        decision: Decision,
        fun_arrays: list,
        sig: Signature | None = None,
        fingerprint: Callable[[], Hashable | None] | None = None,
    ) -> Miss | None:
        """The miss eqxstable's `filter_jit` would have made for this call, or `None` for a hit.

        **Arguments:**

        - `decision`: what `before` decided for this call (after `settle`).
        - `fun_arrays`: the arrays of the function the call was made with, in order: the
            program's arguments too, so a new shape there compiles again.
        - `sig`: the call's `signature` of its bound arguments, if already made.
        - `fingerprint`: makes the fingerprint of what the call's trace produced
            (`_doctor/_reuse.py`), or `None` where there is none (the miss then compiles).

        **Returns:**

        The predicted [`eqxstable.Miss`][], with the reason `--stabilize` would give, and
        `compiled=False` where it would run a program already compiled for an equal trace.
        """
        wrapper, program, entry, rebound, args, kwargs, leaves, context = decision
        dynamic = [*itertools.compress(leaves, entry.dyn_sel), *fun_arrays]
        avals = tuple(map(_array_leaf, dynamic))
        abstract = any(isinstance(x, Tracer) for x in dynamic)
        # A guest under a transformation detaches and traces; otherwise JAX's caches decide.
        detached = abstract and _detaches(program, entry, context, avals)
        elsewhere = not detached and _in_other_context(program, entry, context, avals)
        was_abstract = entry in program.traced_abstract
        if not detached and not _counts(program, entry, context, avals, abstract):
            if was_abstract and entry not in program.traced_abstract:
                self.late += 1
            return None
        if sig is None:
            sig = signature(args, kwargs)
        if fun_arrays:
            fun_leaves = tuple(zip(wrapper.array_paths(), map(_array_leaf, fun_arrays)))
            sig = dataclasses.replace(sig, leaves=sig.leaves + fun_leaves)
        # The jit layer's own explanation, in the same order and words as a real miss.
        miss = explain_stable_miss(
            fun_names(wrapper.fun)[0], rebound, entry.mutated, sig, program.history
        )
        if elsewhere and miss.kind == "first" and program.history:
            # Equal arguments, traced before: what changed is the context JAX keys by (the
            # jit layer's words blame JAX's cache, which it cannot tell apart).
            miss = Miss("first", "", in_another_context(fun_names(wrapper.fun)[0]))
        program.history.append(sig)
        entry.mutated = None
        compiles = self._compiles(program, entry, fingerprint)
        if under_a_trace():
            # As `eqxstable._jit._accounting.settle`: what JAX compiles under a transformation
            # is its own derived program.
            miss = not_compiled(miss, 0.0, "inside")
        elif not compiles:
            miss = not_compiled(miss, 0.0, "reused")
        return miss

    def _compiles(
        self,
        program: ShadowProgram,
        entry: Entry,
        fingerprint: Callable[[], Hashable | None] | None,
    ) -> bool:
        # As `eqxstable._jit._reuse`: only an entry's first trace looks for a program compiled
        # for an equal trace under a token that had that one trace; a later trace of a guest, or
        # of a token with guests, detaches to a token of its own (`_jit._token.Split`). The
        # entry keeps running the shared program for the types it ran it for (`seen` keeps
        # them), and a guest still counts as one: the shared token, traced once, stays the
        # target of later equal traces.
        token = program.tokens.get(entry)
        if token is None:
            fp = fingerprint() if fingerprint is not None else None
            target = self.fingerprints.get(fp) if fp is not None else None
            if target is not None and target.traces == 1:
                target.guests += 1
                program.tokens[entry] = ShadowToken(target)
                return False
            program.tokens[entry] = token = ShadowToken()
            if fp is not None:
                self.fingerprints.setdefault(fp, token)
        elif token.target is not None:
            program.tokens[entry] = ShadowToken()
        elif token.guests:
            program.tokens[entry] = ShadowToken()
        else:
            token.traces += 1
        return True


def _detaches(
    program: ShadowProgram, entry: Entry, context: Hashable, avals: tuple[ArrayLeaf, ...]
) -> bool:
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


def _in_other_context(
    program: ShadowProgram, entry: Entry, context: Hashable, avals: tuple[ArrayLeaf, ...]
) -> bool:
    """Whether JAX traced this entry for these array types before, in another trace context."""
    types = tuple(leaf[:3] for leaf in avals)
    return any(c != context and t == types for c, t in program.traced.get(entry, ()))


def _counts(
    program: ShadowProgram,
    entry: Entry,
    context: Hashable,
    avals: tuple[ArrayLeaf, ...],
    abstract: bool,
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
