"""One jitted program: the `jax.jit` of a body that rebuilds the call from an `Entry`, the cache
of entries, and the history of signatures that explains each miss.

Wrappers of equivalent functions (the same `stable_key`, the same options) share one program
(found by key in `_sharing.py`), so `es.filter_jit(f)(x)` written inline does not recompile, as
with `equinox.filter_jit`.
"""

import functools as ft
import weakref
from typing import Any

import jax

from . import _debug_mode, _reuse
from ._accounting import Call, current, Miss, not_compiled, notify
from ._bind import Binder
from ._cache import Cache
from ._entry import Entry
from ._explain import after_failed_trace, explain_stable_miss
from ._fun import FunParts
from ._guards import check
from ._lru import sizes
from ._outputs import split_output as _split_output
from ._signature import field_path, Signature, signature, with_function_arrays
from ._token import Token, trace_sig


def _abstract(call: Call) -> bool:
    """Whether `call` runs under a transformation: some argument (or array of the function) is a
    tracer. Asked only on a miss, never on the hit path."""
    return call.transformed()


def _eager() -> bool:
    return bool(jax.config.jax_disable_jit)  # pyright: ignore[reportAttributeAccessIssue]


def _strip_wrappers(fun: Any) -> Any:
    seen = set()
    while id(fun) not in seen:  # `f.__wrapped__ = f` must not hang.
        seen.add(id(fun))
        if isinstance(fun, ft.partial):
            inner = fun.func
        else:
            inner = getattr(fun, "__wrapped__", None)
        if inner is None:
            return fun
        fun = inner
    return fun


def fun_names(fun: Any) -> tuple[str, str]:
    """The `__name__` and `__qualname__` that compile logs and profiles should show."""
    fun = _strip_wrappers(fun)
    try:
        return fun.__name__, fun.__qualname__
    except AttributeError:
        return type(fun).__name__, type(fun).__qualname__


# How many signatures of traces that raised a program keeps (`Program.failed`).
_FAILED_KEPT = 8


class Program:
    """The jitted body of one function's static part with one set of options, and its cache.

    The function's arrays are arguments of the program (donated with the rest under
    `donate="all"`), so wrappers of modules that differ only in their weights share it."""

    def __init__(
        self, fun: Any, parts: FunParts, donated_args: str, jitkwargs: dict[str, Any], key
    ):
        self.fun_treedef = parts.treedef
        self.fun_mask = parts.mask
        self.name, self.qualname = fun_names(fun)
        self.donated_args = donated_args
        self.jitkwargs = jitkwargs
        self.options = _options(jitkwargs)
        self.key = key
        self.cache = Cache(donated_args, self._evicted)
        self.bind = Binder(fun)
        # The signature of every call that compiled, oldest first: what a new miss is compared to
        # (the latest `sizes.entries` of them).
        self.history: list[Signature] = []
        # The signatures of the misses decided and being traced now, in decision order (see
        # `_decide`); `clear()` leaves them, as they are still running.
        self.deciding: list[Signature] = []
        # The signatures of the latest misses whose trace raised (no program): a later miss
        # with no compiled one before it is explained against them (`after_failed_trace`).
        self.failed: list[Signature] = []
        # Used only if JAX traces the body outside a call of a wrapper (it does not today).
        self.template = parts.template
        # The entries whose compiled programs can raise while they run: their calls wait.
        self.waits: set[Entry] = set()
        # The entries traced (and counted) only under a transformation so far (`jax.grad`,
        # `jax.vmap`, an outer `jax.jit`): their first call at the top level compiles the jaxpr
        # JAX kept from that trace without tracing again, which is no new miss.
        self.traced_abstract: set[Entry] = set()
        self.jitted = self._make_jitted()
        # The live wrappers (their shared states) that call this program (see `unuse`).
        self.users = 0
        _all_programs.add(self)

    def rebuild_fun(self, template: tuple, fun_dynamic: Any) -> Any:
        """The function inside a trace: its arrays (traced) put back among its other leaves."""
        return FunParts(self.fun_treedef, self.fun_mask, template, ()).rebuild(fun_dynamic)

    split_output = staticmethod(_split_output)

    def _evicted(self, entry: Entry) -> None:
        self.waits.discard(entry)
        self.traced_abstract.discard(entry)

    def clear(self) -> None:
        self.cache.clear()
        self.history.clear()
        self.failed.clear()
        self.waits = set()
        self.traced_abstract = set()
        # A fresh `jax.jit` object drops JAX's compiled programs along with ours.
        self.jitted = self._make_jitted()
        _reuse.forget(self)

    def _make_jitted(self):
        def body(donated: list, kept: list, fun_dynamic: list, token: Token):
            call = current.call
            if _eager() or _debug_mode.inlined(body):
                # Under `jax.disable_jit()` JAX runs this on every call without tracing: no miss,
                # no guard, and the output is the function's own. What JAX compiles meanwhile
                # (each operation of the function, run eagerly) is none of this call's programs:
                # the `jax.monitoring` listener ignores it, as while lowering. The same for a
                # call inlined into another jitted function under Equinox's debug mode
                # (`_debug_mode.py`): its trace is the outer function's.
                entry = call.entry if call is not None else token.owner()
                assert entry is not None
                if call is not None:
                    call.lowering = True
                template = call.wrapper._fun_template if call is not None else self.template
                args, kwargs = entry.rebuild(donated, kept)
                return self.rebuild_fun(template, fun_dynamic)(*args, **kwargs)
            sig = trace_sig(donated, kept, fun_dynamic)
            # A token with guests stands for the one trace they matched (`_reuse.py`).
            token.check(self, call, sig)
            owner = token.owner()
            entry = call.entry if call is not None else owner
            assert entry is not None
            record = (
                call is not None
                and call.program is self
                and (not call.lowering or call.aot)
                and not call.miss_decided
            )
            explained = None
            if record:
                assert call is not None
                call.miss_decided = True
                # Decide the miss and run the guards before the user's function is traced, so
                # that a refused recompilation costs nothing and leaves nothing half-made.
                explained = self._decide(call, entry)
            # The calling wrapper's own function is traced, not the one this program was made
            # for: wrappers of equivalent functions share the program, and each checks on every
            # call that its function still has the key the program was made for.
            template = call.wrapper._fun_template if call is not None else self.template
            fun = self.rebuild_fun(template, fun_dynamic)
            # The objects this trace is called with: a call of the same wrapper inside the
            # trace (under `jax.vmap`) may make the entry hold its own by the time it returns.
            call_template = entry.template
            args, kwargs = entry.rebuild(donated, kept)
            try:
                out = fun(*args, **kwargs)
            except BaseException:
                if explained is not None:
                    assert call is not None
                    # A trace that raised still traced: it counts, as for `max_traces` and
                    # `eqx.debug.assert_max_traces`, but it made no program to compare with,
                    # and compiled none.
                    with call.stats.lock:
                        self._undecide(call, explained[1])
                        if explained[1] is not None:
                            self.failed.append(explained[1])
                            del self.failed[:-_FAILED_KEPT]
                        call.stats.uncompiled += 1
                        call.record(not_compiled(explained[0], 0.0, "raised"))
                    if call.notify:
                        notify(call.wrapper, call.miss)  # pyright: ignore[reportArgumentType]
                raise
            token.traced(sig)
            if explained is not None:
                assert call is not None
                self._commit(call, entry, *explained, decided=True)
            # An output leaf that is one of the inputs' static objects is each call's own.
            return _split_output(out, call_template, template)

        # Compile logs and profiles show the user's function, not ours.
        body.__name__ = self.name
        body.__qualname__ = self.qualname
        # As `equinox.filter_jit`: every mode but "none" donates the function's own arrays too.
        donate_argnums = () if self.donated_args == "none" else (0, 2)
        jitted = _debug_mode.real_jit(
            body, static_argnums=3, donate_argnums=donate_argnums, **self.jitkwargs
        )
        if _debug_mode.replaced():
            return _debug_mode.Inlining(body, jitted, self.name)
        return jitted

    def _explain(self, call: Call, entry: Entry) -> tuple[Miss, Signature | None]:
        # Arguments that do not fit the function raise its `TypeError` now, as
        # `equinox.filter_jit` (which binds every call) does, not a guard's error or a miss.
        self.bind(call.args, call.kwargs)
        try:
            sig = signature(call.args, call.kwargs)
        except RecursionError:
            # A pytree nested deeper than Python's recursion limit: still compile, unexplained.
            sig = None
        if sig is not None and call.wrapper._dynamic:
            sig = with_function_arrays(sig, call.wrapper._array_paths())
        miss = explain_stable_miss(
            self.name,
            call.wrapper._state.rebound,
            getattr(entry, "mutated", None),
            sig,
            # The misses decided before this one: recorded, or still being traced (by another
            # thread, or by this one around this call: a function that calls itself with a
            # smaller static argument misses inside its own trace, attack 9b-09).
            self.history + self.deciding,
            unpinned_place(entry.unpinned, sig, call.args, call.kwargs),
        )
        if self.failed and sig is not None and not (self.history or self.deciding):
            # No program yet, but a trace that raised: "first call" would not be true.
            miss = after_failed_trace(miss, self.name, self.failed, sig)
        return miss, sig

    def _check(self, call: Call, miss: Miss) -> None:
        wrapper = call.wrapper
        stats = call.stats
        check(
            self.name,
            miss,
            # The misses recorded and those decided in other threads (or around this call, in
            # its own trace) that are being traced now: each counts from its decision on.
            stats.missed + stats.deciding,
            wrapper.max_traces,
            wrapper.on_recompile,
        )

    def _decide(self, call: Call, entry: Entry) -> tuple[Miss, Signature | None]:
        """A traced miss, explained and guarded at once under the wrapper's lock (a hit takes
        none): two threads that miss together are counted one after the other, so `max_traces`
        and `on_recompile` hold, and each is explained against the misses decided before it,
        recorded or still being traced (attack 11b-01). Until it is recorded (`_commit`) or its
        trace raised, it counts in `stats.deciding` and its signature is in `self.deciding`."""
        stats = call.stats
        with stats.lock:
            miss, sig = self._explain(call, entry)
            self._check(call, miss)
            stats.deciding += 1
            if sig is not None:
                self.deciding.append(sig)
        return miss, sig

    def _undecide(self, call: Call, sig: Signature | None) -> None:
        # Under `call.stats.lock`, in the same hold that records the miss: no decision sees the
        # miss counted neither as deciding nor as recorded.
        call.stats.deciding -= 1
        if sig is not None:
            for i, other in enumerate(self.deciding):
                if other is sig:
                    del self.deciding[i]
                    break

    def _commit(
        self, call: Call, entry: Entry, miss: Miss, sig: Signature | None, decided: bool = False
    ) -> None:
        with call.stats.lock:
            if sig is not None:
                self.history.append(sig)
                if len(self.history) > sizes.entries:
                    del self.history[: len(self.history) - sizes.entries]
            if decided:
                self._undecide(call, sig)
            call.record(miss)
        self.cache.compiled(entry)
        if _abstract(call):
            self.traced_abstract.add(entry)
        else:
            self.traced_abstract.discard(entry)
        if call.notify:
            notify(call.wrapper, miss)
        entry.mutated = None
        entry.unpinned = None
        # What the function changed while it was traced (a `nonlocal` trace counter, say) is
        # part of this program, not a change after it: look again from here on.
        self.cache.rekey(entry)

    def untraced_miss(self, call: Call) -> None:
        """A compilation without a trace (a new input sharding, or a program `.lower()`ed before
        its first call): explained, guarded and recorded here, before XLA compiles.

        What JAX compiles while a call runs under a transformation is JAX's own derived program
        (a JVP, a transpose, a batched jaxpr), none of this cache's: not a miss. Nor is the
        first top-level compile of what a transformed call traced (and counted)."""
        if _abstract(call):
            return
        if call.entry in self.traced_abstract:
            # JAX compiles the trace it kept: a compile of this wrapper's, with no miss.
            self.traced_abstract.discard(call.entry)
            call.stats.late += 1
            return
        with call.stats.lock:
            miss, sig = self._explain(call, call.entry)
            self._check(call, miss)
            self._commit(call, call.entry, miss, sig)


def unpinned_place(
    unpinned: tuple | None, sig: Signature | None, args: tuple, kwargs: dict
) -> tuple | None:
    """`Entry.unpinned` with its place as a path (`None` for the function itself).

    **Arguments:**

    - `unpinned`: the entry's `unpinned`, `(where, old, new, why)`, or `None`.
    - `sig`: the call's signature, whose leaves an index `where` counts.
    - `args`, `kwargs`: the call's bound arguments, where a module's static field is found.

    **Returns:**

    `(path, old, new, why)` for `explain_stable_miss`, or `None`.
    """
    if unpinned is None:
        return None
    where, old, new, *why = unpinned
    if type(where) is int:
        path = sig.leaves[where][0] if sig is not None and where < len(sig.leaves) else ""
    elif where is not None:
        path = field_path(where[1], args, kwargs)
    else:
        path = None
    return (path, old, new, *why)


# Every program alive, whether kept by key or not, for `es.clear_caches()` (`_sharing.py`).
_all_programs: "weakref.WeakSet[Program]" = weakref.WeakSet()


def _options(jitkwargs: dict[str, Any]) -> tuple:
    return tuple(sorted(jitkwargs.items()))
