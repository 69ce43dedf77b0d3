"""Cache accounting for the stable `filter_jit`: `CacheInfo`, `Miss`, the per-wrapper counters,
the call that is running right now, and the `jax.monitoring` listener that attributes trace and
compile seconds to it."""

import threading
import weakref
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax.monitoring
import jax.tree_util as jtu
from jax.core import Tracer

from ._lru import sizes


MissKind = Literal[
    "first",
    "structure",
    "static",
    "identity",
    "shape",
    "dtype",
    "weak_type",
    "sharding",
    "mutated",
]


class Miss(NamedTuple):
    """Why one call of a stable [`eqxstable.filter_jit`][] traced again (and compiled, unless
    the trace produced a program already compiled: `compiled`).

    - `kind`: one of `"first"`, `"structure"`, `"static"`, `"identity"`, `"shape"`, `"dtype"`,
        `"weak_type"`, `"sharding"`, `"mutated"`.
    - `path`: the leaf (or pytree node) that differs from the closest earlier call, in the
        arguments' own terms, e.g. `args[0].mlp.activation` or `kwargs['x']`; `""` for `"first"`.
    - `reason`: one sentence with the old and the new value and what to do about it.
    - `compiled`: `False` when XLA compiled nothing for this miss: the trace produced a program
        that was already compiled (the same jaxpr by value, input types, shardings, donation,
        configuration and backend), which the call ran with no lowering and no XLA compile; or
        JAX lowered it and loaded the executable from its persistent compilation cache
        (`jax_compilation_cache_dir`), compiled by an earlier process (`CacheInfo.loaded`).
    - `saved_seconds`: for such a miss, the XLA compile seconds that program took when it was
        compiled (what this miss did not spend again).
    """

    kind: MissKind
    path: str
    reason: str
    compiled: bool = True
    saved_seconds: float = 0.0


_COMPILED = "traced and compiled."
# What a miss that compiled nothing says in place of `_COMPILED`, by how it got its program.
_NOT_COMPILED = {
    "reused": "traced, and the trace was a program already compiled, which it ran (no compile).",
    "loaded": (
        "traced, and JAX loaded its program from the persistent compilation cache (no compile)."
    ),
    "raised": "traced, and the trace raised (no compile).",
    "lowered": (
        "traced by `.lower()` (no compile: its `.compile()`, or the first call, compiles the "
        "trace without tracing again, once)."
    ),
    "inside": (
        "traced inside another trace (`jax.vmap`, `jax.grad`, `jax.eval_shape`, an outer "
        "`jax.jit`), which compiles its own program, if any (no compile of this one)."
    ),
}


def not_compiled(miss: Miss, saved_seconds: float, how: str) -> Miss:
    """`miss` as one that compiled nothing: its program was `"reused"` (compiled for an equal
    trace), `"loaded"` (from JAX's persistent compilation cache), traced `"inside"` another
    trace, which compiled nothing for it, or whose trace `"raised"`.
    A reason that says the call compiled says what happened instead."""
    reason = miss.reason
    if reason.endswith(_COMPILED):
        reason = reason[: -len(_COMPILED)] + _NOT_COMPILED[how]
    return miss._replace(reason=reason, compiled=False, saved_seconds=saved_seconds)


class CacheInfo(NamedTuple):
    """The counters of a stable [`eqxstable.filter_jit`][], in the shape of
    `functools.lru_cache`'s `cache_info()`.

    - `hits`: calls served by an already compiled program.
    - `misses`: calls that traced (`hits + misses` is the number of calls). A trace that raised
        counts, as `eqx.debug.assert_max_traces` counts it; a call refused by a guard does not
        (nothing was traced); under `jax.disable_jit()` a call is a hit (nothing is traced). A
        `.lower(...)` that traced is a call and a miss (the first call after it compiles that
        trace without tracing again: a hit); one that JAX's trace cache served counts nothing.
    - `maxsize`: the most compiled programs this wrapper's cache holds (4096 unless changed; see
        `eqxstable/_jit/_lru.py`): the least recently used are dropped beyond it, as JAX drops
        them from its own caches, and traced again if needed; the counts stay exact. What is
        dropped is a cache entry (one set of static arguments) with all its programs (one per
        input shape and dtype): an entry whose programs alone exceed `maxsize` is dropped too,
        after the call that compiled the one too many, so `currsize <= maxsize` always holds.
    - `currsize`: the number of compiled programs this wrapper's cache holds now.
    - `compile_seconds`: XLA compile time of this wrapper's programs (from `jax.monitoring`),
        the ones `compiles` counts: not what JAX derives from them under a transformation (a
        JVP, a batched program).
    - `trace_seconds`: tracing time of this wrapper's function (from `jax.monitoring`).
    - `traces`: the number of misses (each traced the function, or lowered it again).
    - `compiles`: how many programs XLA compiled for this wrapper's calls (JAX's compile
        events): one for each miss that compiled (the others reused one compiled for an equal
        trace, loaded one, or traced inside another trace, whose program is not this wrapper's),
        and one for the first call at the top level of what a call traced only under a
        transformation (JAX compiles that trace then, with no miss: `compiles <= traces`), or
        by `.lower()`, or by that `.lower()`'s `.compile()`, whose executable the calls then run
        (whichever compiled it first). A `.compile(compiler_options)` makes a program of its own
        that no call runs, and is not counted.
    - `loaded`: how many misses JAX served from its persistent compilation cache
        (`jax_compilation_cache_dir`): lowered, then loaded from disk, not compiled. Its load
        time is counted in `compile_seconds` (JAX's compile event covers it).
    """

    hits: int
    misses: int
    maxsize: int
    currsize: int
    compile_seconds: float
    trace_seconds: float
    traces: int = 0
    compiles: int = 0
    loaded: int = 0


class Stats:
    """The per-wrapper counters. They live on the wrapper and die with it."""

    __slots__ = (
        "calls",
        "missed",
        "reused",
        "loaded",
        "uncompiled",
        "late",
        "misses",
        "compile_seconds",
        "trace_seconds",
        "deciding",
        "lock",
        "__weakref__",
    )

    def __init__(self):
        self.clear()
        # How many misses were decided (guarded, explained) and are being traced now, in any
        # thread: the guards count them with `missed`, so that concurrent misses cannot all
        # pass `max_traces` (attack 11b-01). Left alone by `clear()`: they are still running.
        self.deciding = 0
        # Held while a miss is decided and while one is recorded (never on a hit): the count the
        # guards read and the history a miss is explained against change only under it.
        self.lock = threading.RLock()

    def record(self, miss: Miss) -> None:
        self.missed += 1
        self.misses.append(miss)
        if len(self.misses) > sizes.entries:
            del self.misses[: len(self.misses) - sizes.entries]

    def clear(self) -> None:
        self.calls = 0
        # The number of misses; `misses` keeps the latest `sizes.entries` of them.
        self.missed = 0
        # How many misses ran a program already compiled for an equal trace (`_reuse.py`).
        self.reused = 0
        # How many misses JAX loaded from its persistent compilation cache (no XLA compile).
        self.loaded = 0
        # How many misses compiled nothing otherwise: their trace raised, or ran inside
        # another trace.
        self.uncompiled = 0
        # How many compiles had no miss of their own: the first call at the top level of what
        # a call traced only under a transformation (`Program.untraced_miss`).
        self.late = 0
        self.misses: list[Miss] = []
        self.compile_seconds = 0.0
        self.trace_seconds = 0.0


class Call:
    """One call of a stable `filter_jit` that is running right now in this thread. The traced
    body and the `jax.monitoring` listener find it through `current.call`."""

    __slots__ = (
        "program",
        "wrapper",
        "stats",
        "args",
        "kwargs",
        "entry",
        "miss_decided",
        "lowering",
        "aot",
        "committed",
        "notify",
        "loaded",
        "miss",
        "compiled",
        "compile_seconds",
        "_transformed",
    )

    def __init__(self, program: Any, wrapper: Any, args, kwargs, entry: Any, lowering: bool):
        self.program = program
        self.wrapper = wrapper
        self.stats: Stats = wrapper._stats
        self.args = args
        self.kwargs = kwargs
        self.entry = entry
        # Set when this call's miss was decided (by the traced body, or by the listener for a
        # compilation without a trace), so that it is decided once.
        self.miss_decided = False
        self.lowering = lowering
        # Whether this is a `.lower()`: its trace is a miss, though the listener ignores what
        # JAX lowers meanwhile (`lowering`).
        self.aot = False
        # Set when this call's miss was recorded: a call that raises before that is not counted.
        self.committed = False
        # Whether the miss listeners hear of the miss when it is recorded (a first call tells
        # them itself, once it knows whether the program was compiled or reused).
        self.notify = True
        # The compile seconds JAX's persistent compilation cache saved this call, when the
        # executable was loaded from it (`None`: it was not).
        self.loaded: float | None = None
        # This call's miss, once recorded (`stats.misses[-1]` may be another thread's by then).
        self.miss: Miss | None = None
        # Whether XLA compiled a program of this wrapper's while the call ran (JAX's event).
        self.compiled = False
        # For a `Lowered.compile()` (`aot` while `lowering`): the seconds of its XLA compile.
        self.compile_seconds = 0.0
        self._transformed: bool | None = None

    def transformed(self) -> bool:
        """Whether the call runs under a transformation: some argument (or array of the
        function) is a tracer. Asked on a miss or a compile only, never on the hit path."""
        if self._transformed is None:
            leaves = jtu.tree_leaves((self.args, self.kwargs, self.wrapper._dynamic))
            self._transformed = any(isinstance(x, Tracer) for x in leaves)
        return self._transformed

    def record(self, miss: Miss) -> None:
        """Records this call's miss."""
        self.miss = miss
        self.stats.record(miss)
        self.committed = True

    def amend(self, miss: Miss) -> None:
        """Replaces this call's recorded miss (in `stats.misses`, unless cleared meanwhile)."""
        misses = self.stats.misses
        for i in range(len(misses) - 1, max(-1, len(misses) - 64), -1):
            if misses[i] is self.miss:
                misses[i] = miss
                break
        self.miss = miss


class _Current(threading.local):
    call: Call | None = None


current = _Current()

# Every live wrapper's `Stats`, for `es.report()`; weak, so a wrapper's counters die with it.
live_wrappers: "weakref.WeakSet[Any]" = weakref.WeakSet()
# Called as `listener(wrapper, miss)` after each miss is recorded: the hook for tools (the pytest
# plugin) that must see every miss, also of a wrapper that is gone by the time they look.
miss_listeners: "list[Callable[[Any, Miss], None]]" = []


def notify(wrapper: Any, miss: Miss) -> None:
    for listener in miss_listeners:
        listener(wrapper, miss)


# The `jax.monitoring` events of a trace, a lowering and an XLA compile, named once here for the
# layer and the doctor (which listens to plain `jax.jit` too).
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def _listener(event: str, duration_secs: float, **kwargs: str | int) -> None:
    del kwargs
    call = current.call
    if call is None:
        return
    if call.lowering:
        if call.aot and event == TRACE_EVENT:
            # A `.lower()`'s trace is a miss of this wrapper's.
            call.stats.trace_seconds += duration_secs
        elif call.aot and event == COMPILE_EVENT:
            # A `Lowered.compile()`: it decides whether this compile is one of the wrapper's.
            call.compiled = True
            call.compile_seconds += duration_secs
        return
    if event == COMPILE_EVENT:
        # Under a transformation what XLA compiles while the call runs is JAX's own derived
        # program (a JVP, a batched one): not one of this wrapper's (`CacheInfo.compiles`).
        if not call.transformed():
            call.compiled = True
            call.stats.compile_seconds += duration_secs
    elif event == TRACE_EVENT:
        call.stats.trace_seconds += duration_secs
    if event in (LOWER_EVENT, COMPILE_EVENT) and not call.miss_decided:
        # JAX lowers and compiles without tracing again when only the input shardings changed,
        # or when this program was traced by `.lower()` before; for a new device it may even
        # reuse the lowering and only compile. That is still a miss. Deciding it at the first
        # of these events lets the guards raise before XLA compiles, where JAX allows it.
        call.miss_decided = True
        call.program.untraced_miss(call)


_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"


def _saved_listener(event: str, duration_secs: float, **kwargs: str | int) -> None:
    del kwargs
    call = current.call
    if event == _SAVED_EVENT and call is not None and not call.lowering:
        call.loaded = (call.loaded or 0.0) + max(duration_secs, 0.0)


def _event_listener(event: str, **kwargs: str | int) -> None:
    del kwargs
    call = current.call
    if event == _CACHE_HIT_EVENT and call is not None and not call.lowering:
        if call.loaded is None:
            call.loaded = 0.0


def settle_loaded(call: Call) -> None:
    """After a call's miss compiled (or seemed to): if JAX loaded the executable from its
    persistent compilation cache instead, the miss compiled nothing (`CacheInfo.loaded`)."""
    saved, call.loaded = call.loaded, None
    stats = call.stats
    miss = call.miss
    if saved is None or not call.committed or miss is None:
        return
    if miss.compiled:
        call.amend(not_compiled(miss, saved, "loaded"))
        stats.loaded += 1


def settle(call: Call) -> None:
    """After a call whose miss was recorded: what it compiled. A miss loaded from JAX's
    persistent compilation cache, or traced inside another trace (`jax.vmap`, `jax.eval_shape`,
    an outer `jax.jit`), compiled no program of this wrapper's (`CacheInfo.compiles`); one
    called inside another trace with concrete arguments (`jax.ensure_compile_time_eval()`) ran
    its own program, and XLA compiled it if JAX said so (the compile event)."""
    settle_loaded(call)
    stats = call.stats
    miss = call.miss
    if not (call.committed and miss is not None and miss.compiled):
        return
    from ._fingerprint import under_a_trace  # Here: only a miss comes this way.

    # Under a transformation what JAX compiles is its own derived program (a batched one, or
    # the outer function's): not one of this wrapper's. (A JAX that cannot tell counts it.)
    if under_a_trace() and not call.compiled:
        call.amend(not_compiled(miss, 0.0, "inside"))
        stats.uncompiled += 1


jax.monitoring.register_event_duration_secs_listener(_listener)
jax.monitoring.register_event_duration_secs_listener(_saved_listener)
jax.monitoring.register_event_listener(_event_listener)
