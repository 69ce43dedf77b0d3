"""What eqxstable's `filter_jit` would do with the calls an `equinox.filter_jit` receives.

The prediction is not a model of eqxstable written a second time: each call is bound and looked up
in the jit layer's own `Cache` (the identity fast path, the `Watch` and the `stable_key` slow path
of the hit path, `Cache.rekey` after a trace, `Cache.pin` for a trace that calls Python while it
runs, decided by the jit layer's own `runs_python`), the jitted function is watched with the keys
layer's own `compute` and `Watch` as a stable wrapper watches it, programs are shared between
equivalent functions by the jit layer's `program_key` as `get_program` shares them (and aliased
after a trace, for the very objects that traced, as `alias_program` does), and a predicted miss
is explained by the jit layer's own `explain_stable_miss`, the code that explains a real one.
JAX's part (a program per set of array types under one cache entry, the function's own arrays
included) is `_jax_caches.py`'s; whether a miss runs a program already compiled for an equal
trace, as `_jit._reuse` decides, is `_reuse.py`'s.

The shadow programs are the doctor's own: sharing the jit layer's table would put the observed
script's calls into the caches of the stable wrappers it makes itself.
`tests/test_doctor_prediction.py` runs every example both ways and checks that `--stabilize` does
what was predicted.
"""

import itertools
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import jax.tree_util as jtu
from jax.core import Tracer

from .._jit import (
    array_leaf as _array_leaf,
    Binder,
    Cache,
    describe_change,
    Entry,
    explain_stable_miss,
    fun_identity,
    fun_names,
    FunParts,
    Miss,
    not_compiled,
    program_key,
    rebound_advice,
    runs_python,
    same_fun,
    Signature,
    signature,
    sizes,
    split_fun,
    under_a_trace,
    unpinned_place,
    with_function_arrays,
)
from .._keys import compute, Key, Watch
from ._jax_caches import context, counts, detaches, in_another_context, in_other_context
from ._reuse import compiles, ShadowToken


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


def donated(options: tuple) -> str:
    """Which leaves eqxstable's `filter_jit` donates for an Equinox wrapper with these options
    (`donate_first`, `donate_rest`, `filter_warning`): part of a program's key."""
    return _DONATED.get((bool(options[0]), bool(options[1])), repr(options))


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
        # The key paths of the function's arrays: they are arguments of the program (`fun.weight`).
        self.paths: list[tuple] | None = None
        self.program = program
        self.calls = 0
        # The one (program, entry) every call used so far, or `_MANY`: while it is one, a call
        # that Equinox served from its cache was compiled for under that entry too.
        self.pair: Any = None
        self.resnapshot()

    def resnapshot(self) -> None:
        self.fun_key, self.fun_watch = compute(self.fun)

    def array_paths(self) -> list[tuple]:
        if self.paths is None:
            flat = jtu.tree_flatten_with_path(self.fun)[0]
            self.paths = [path for (path, _), m in zip(flat, self.parts.mask) if m]
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
    jit layer's `program_key`, as `get_program` shares them), and the per-call decisions."""

    def __init__(self):
        self.programs: dict[Any, ShadowProgram] = {}
        # As `eqxstable._jit._sharing._aliases`: the key a function has after a trace that
        # changed it (a list it appends to), for the very objects that traced it alone
        # (`fun_identity`): a function rebuilt over the same shared list has that key too, but
        # never ran the trace, so it gets a program of its own.
        self.aliases: dict[Any, tuple[ShadowProgram, tuple]] = {}
        # As `eqxstable._jit._reuse._by_fingerprint`: tokens by the fingerprint of their trace.
        self.fingerprints: dict[Hashable, ShadowToken] = {}
        # Compiles with no miss of their own (`CacheInfo.compiles`): the first call at the top
        # level of what a call traced only under a transformation.
        self.late = 0
        # Every shadow program made (`cleared`): a wrapper keeps its own once it is unshared.
        self.all_programs: list[ShadowProgram] = []
        # How many times the script called `jax.clear_caches()`.
        self.clears = 0
        # How many entries were dropped with their programs, past the bound (`Cache.bound`).
        self.dropped = 0
        # How many misses would run a program already compiled for an equal trace (not those
        # that compile nothing for another cause: a trace under a transformation, a `.lower()`).
        self.reused = 0

    def wrapper(self, fun: Any, options: tuple) -> ShadowWrapper:
        """A shadow of the stable wrapper that `--stabilize` would make of `fun` with Equinox's
        `options` (`donate_first`, `donate_rest`, `filter_warning`)."""
        parts = split_fun(fun)
        which = donated(options)
        return ShadowWrapper(fun, parts, which, self._program(fun, parts, which))

    def _program(self, fun: Any, parts: FunParts, which: str) -> ShadowProgram:
        # As `get_program`: the options passed on are the donation mode only.
        key = program_key(fun, parts, which, ())
        program = self.programs.get(key)
        if program is None:
            alias = self.aliases.get(key)
            if alias is not None and same_fun(alias[1], parts):
                return alias[0]
            program = self.programs[key] = ShadowProgram(key, fun, which)
            self.all_programs.append(program)
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
            else:
                # Rebound to an equal value: a pinned program may call the old objects.
                wrapper.program.cache.drop_pinned()
        program = wrapper.program
        if kwargs:
            args, kwargs = program.bind(args, kwargs)
        leaves, treedef = jtu.tree_flatten((args, kwargs))
        entry = program.cache.lookup(leaves, treedef, wrapper.parts)
        return Decision(wrapper, program, entry, rebound, args, kwargs, leaves, context())

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
            self._traced(decision)
            return False
        # Equinox reused a program compiled for these array types, and every call of this
        # wrapper so far used this one entry: eqxstable compiled for them under it too.
        return entry in program.seen and wrapper.pair is not _MANY

    def _traced(self, decision: Decision) -> None:
        # What tracing changed in the function or its arguments (a trace counter) is part of
        # the program, not a later change: a stable wrapper looks again after its traces
        # (`Cache.rekey`, `_State.traced`, `alias_program`).
        wrapper, program, entry = decision[:3]
        program.cache.rekey(entry)
        wrapper.resnapshot()
        key = program_key(wrapper.fun, wrapper.parts, wrapper.which, ())
        if key != program.key and key not in self.programs:
            self.aliases[key] = (program, fun_identity(wrapper.parts))

    def lowered(self, decision: Decision, fun_arrays: list, traced: bool) -> Miss | None:
        """The miss eqxstable's `.lower()` would make for this call (`traced`: whether Equinox's
        traced), or `None`: a trace JAX's trace cache does not hold is a miss that compiles
        nothing, and the first call at the top level compiles it with no miss of its own, as
        after a trace under a transformation (`_jit/_lowered.py`). Where the script calls
        `.compile()` but never the function, `--stabilize` counts that compile and the doctor,
        which does not see Equinox's `.compile()`, does not."""
        if traced:
            self._traced(decision)
        miss = self.miss(decision, fun_arrays, lowering=True)
        if miss is not None:
            decision.wrapper.calls += 1
        return miss

    def cleared(self) -> None:
        """After `jax.clear_caches()`: JAX holds no trace or program any more, and eqxstable
        drops its programs kept by key (`_jit._sharing._JaxClear`); its live wrappers keep their
        own programs and entries, which trace again."""
        self.clears += 1
        for program in self.all_programs:
            program.seen.clear()
            program.traced.clear()
            program.traced_abstract.clear()
        self.programs.clear()
        self.aliases.clear()
        # A program compiled before serves no later trace: JAX traces a guest's call under its
        # token again, and the guest detaches (`_jit._token.Token.check`). The token still
        # holds its fingerprint while its entry lives, so that no later trace is offered in its
        # place; the doctor cannot tell when it dies, and keeps it: the compiles predicted
        # after a clear are an upper bound (the report says so).
        for token in self.fingerprints.values():
            token.traces = max(token.traces, 2)

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
        trace: Callable[[], Any] | None = None,
        lowering: bool = False,
        made: bool = False,
    ) -> Miss | None:
        """The miss eqxstable's `filter_jit` would have made for this call, or `None` for a hit.

        **Arguments:**

        - `decision`: what `before` decided for this call (after `settle`).
        - `fun_arrays`: the arrays of the function the call was made with, in order: the
            program's arguments too, so a new shape there compiles again.
        - `sig`: the call's `signature` of its bound arguments, if already made.
        - `fingerprint`: makes the fingerprint of what the call's trace produced
            (`_doctor/_reuse.py`), or `None` where there is none (the miss then compiles).
        - `trace`: gives the closed jaxpr of Equinox's trace of this call (`_reuse.probe`), or
            `None`; `None` where Equinox did not trace it (the program is then taken to be
            unpinned).
        - `lowering`: a `.lower()` of the call, which traces as a transformation does and
            compiles nothing (`lowered`).
        - `made`: whether the output of the call's trace holds objects the trace made
            (`_reuse.output_spec`): the entry is then pinned to the objects that traced it, as
            `_jit/_reuse.py` pins it, and may still run a program compiled for an equal trace.

        **Returns:**

        The predicted [`eqxstable.Miss`][], with the reason `--stabilize` would give, and
        `compiled=False` where it would run a program already compiled for an equal trace.
        """
        wrapper, program, entry, rebound, args, kwargs, leaves, context = decision
        dynamic = [*itertools.compress(leaves, entry.dyn_sel), *fun_arrays]
        avals = tuple(map(_array_leaf, dynamic))
        abstract = lowering or any(isinstance(x, Tracer) for x in dynamic)
        # A guest under a transformation detaches and traces; otherwise JAX's caches decide.
        detached = abstract and detaches(program, entry, context, avals)
        elsewhere = not detached and in_other_context(program, entry, context, avals)
        was_abstract = entry in program.traced_abstract
        if not detached and not counts(program, entry, context, avals, abstract):
            if was_abstract and entry not in program.traced_abstract:
                self.late += 1
            return None
        if sig is None:
            sig = signature(args, kwargs)
        if fun_arrays:
            sig = with_function_arrays(sig, zip(wrapper.array_paths(), fun_arrays))
        # The jit layer's own explanation, in the same order and words as a real miss.
        miss = explain_stable_miss(
            fun_names(wrapper.fun)[0],
            rebound,
            entry.mutated,
            sig,
            program.history,
            unpinned_place(entry.unpinned, sig, args, kwargs),
        )
        if elsewhere and miss.kind == "first" and program.history:
            # Equal arguments, traced before: what changed is the context JAX keys by (the
            # jit layer's words blame JAX's cache, which it cannot tell apart).
            miss = Miss("first", "", in_another_context(fun_names(wrapper.fun)[0]))
        program.history.append(sig)
        if len(program.history) > sizes.entries:
            del program.history[: len(program.history) - sizes.entries]
        entry.mutated = None
        entry.unpinned = None
        # The entry holds one more program (`Program._commit`): its weight in the cache's bound.
        program.cache.compiled(entry)
        if lowering:
            # `.lower()` traces under the entry's own token (`detached_token`), reusing nothing.
            token = program.tokens.get(entry)
            if token is None or token.target is not None:
                program.tokens[entry] = ShadowToken()
            return not_compiled(miss, 0.0, "lowered")
        # The jit layer's own decision (`runs_python`) on Equinox's trace of the same call,
        # whose jaxpr is eqxstable's but for the order of its inputs: a program that calls Python
        # while it runs serves only the objects that traced it (`Cache.pin`), and is neither
        # reused for this trace nor offered to a later one.
        jaxpr = trace() if trace is not None else None
        pinned = jaxpr is not None and runs_python(jaxpr)
        if pinned:
            program.cache.pin(entry, wrapper.parts)
        elif made:
            # Its output's objects are each trace's own (`_jit/_outputs.py`): it serves only the
            # objects that traced it, and a rebuilt function traces again (its own objects).
            program.cache.pin(entry, wrapper.parts, "output")
        compiled = compiles(self.fingerprints, program.tokens, entry, fingerprint, pinned)
        if under_a_trace():
            # As `eqxstable._jit._accounting.settle`: what JAX compiles under a transformation
            # is its own derived program.
            miss = not_compiled(miss, 0.0, "inside")
        elif not compiled:
            program.cache.reused(entry)
            self.reused += 1
            miss = not_compiled(miss, 0.0, "reused")
        # An entry whose programs alone exceed the bound goes with them, after the call.
        program.cache.bound(entry)
        if program.cache.entries.peek(entry.slot) is not entry:
            self.dropped += 1
        return miss
