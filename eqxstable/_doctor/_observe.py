"""Counting every `equinox.filter_jit` call, including wrappers made before the doctor started.

Equinox's `_JitWrapper.__call__` and `.lower` go through the module-level function
`equinox._jit._call`, which is looked up at call time; replacing that one name therefore reaches
every wrapper, old or new. A trace is witnessed from inside the traced body: the body Equinox
jits (`fun_wrapped`) first calls `equinox._jit.hashable_combine` to rebuild the function, so
replacing that name gives a counter that runs exactly when JAX traces, nested calls included.
XLA compile and trace seconds come from `jax.monitoring` duration events.

When Equinox's internals move, the doctor falls back: to `_JitWrapper.__call__` for calls, and to
the `jax.monitoring` trace event (top-level traces only) as the witness of a trace. `install()`
says which hooks it used, and a test fails when it was not the first choice.

Each call is also shown, before it runs, to the prediction (`_predict.py`): what eqxstable's
`filter_jit` would do in the wrapper's place. After the call, a miss of Equinox is explained
(`_explain.py`) and marked avoidable or not; a hit of Equinox where eqxstable would compile is an
added miss.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax.monitoring
import jax.tree_util as jtu

from .._jit import COMPILE_EVENT, LOWER_EVENT, split_fun, static_key, TRACE_EVENT
from .._keys import key_uses_identity, stable_key
from . import _reuse
from ._account import account, account_lowered
from ._predict import Decision, donated, Predictor
from ._quiet import quiet, UserCodeRefused
from ._record import fun_name, location, Record
from ._state import anchor_of, CacheState, Frame, Stack


class Observer:
    """Installs the hooks, keeps one `Record` per jitted function, and uninstalls cleanly.

    **Arguments:**

    - `only_made`: predict what `--stabilize` would do only for the wrappers noted with
        `made()` (those the script made, which `--stabilize` replaces); by default, for all.
    """

    def __init__(self, only_made: bool = False):
        self.only_made = only_made
        self.records: list[Record] = []
        self.hooks: tuple[str, str] = ("none", "none")
        self._by_fun: dict[Any, Record] = {}
        self.predictor = Predictor()
        # The wrappers the script made (`--stabilize` replaces these), by `id` of their anchor,
        # which is held.
        self._made: dict[int, Any] = {}
        self._caches: dict[int, CacheState] = {}
        self._stack = Stack()
        self._undo: list[Callable[[], None]] = []
        self._combine: Callable | None = None
        self._listening = False
        # Whether a trace of Equinox's can be asked for again safely (`_reuse.probe`): only
        # where the trace hook is Equinox's `hashable_combine`, which refuses a second trace.
        self.probes = False

    def made(self, jit_wrapper: Any) -> Any:
        """Notes `jit_wrapper` as made by the script, and returns it."""
        anchor = anchor_of(jit_wrapper)
        self._made[id(anchor)] = anchor
        return jit_wrapper

    def running(self) -> bool:
        """Whether an `equinox.filter_jit` call is running in this thread."""
        return bool(self._stack.frames)

    # -- installation -------------------------------------------------------------------------

    def install(self, fallback: bool = False) -> tuple[str, str]:
        """Patches Equinox once. Returns `(call hook, trace witness)`: the first choice is
        `("equinox._jit._call", "equinox._jit.hashable_combine")`. `fallback=True` uses the
        fallbacks even where the first choice exists (the tests check both)."""
        jit_module = getattr(eqx, "_jit", None)
        call_hook = "none"
        original_call = None if fallback else getattr(jit_module, "_call", None)
        wrapper_cls = getattr(jit_module, "_JitWrapper", None)
        if callable(original_call):
            self._patch(jit_module, "_call", self._make_call(original_call))
            call_hook = "equinox._jit._call"
        elif wrapper_cls is not None and callable(getattr(wrapper_cls, "__call__", None)):
            self._patch(wrapper_cls, "__call__", self._make_method(wrapper_cls.__call__))
            call_hook = "equinox._jit._JitWrapper.__call__"
        witness = "jax.monitoring"
        combine = None if fallback else getattr(jit_module, "hashable_combine", None)
        if call_hook != "none" and callable(combine):
            self._combine = combine
            self._patch(jit_module, "hashable_combine", self._make_combine(combine))
            witness = "equinox._jit.hashable_combine"
        # `jax.clear_caches()` drops JAX's programs, and eqxstable's programs kept by key.
        clear_caches = jax.clear_caches
        self._patch(jax, "clear_caches", functools.wraps(clear_caches)(self._cleared(clear_caches)))
        self._listening = True
        jax.monitoring.register_event_duration_secs_listener(self._listener)
        self._undo.append(self._unlisten)
        self.hooks = (call_hook, witness)
        self.probes = witness == "equinox._jit.hashable_combine"
        return self.hooks

    def _unlisten(self) -> None:
        self._listening = False
        # Older JAX versions cannot unregister a listener; it then stays, inert.
        unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
        if unregister is not None:
            unregister(self._listener)

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _patch(self, owner: Any, name: str, new: Any) -> None:
        old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        setattr(owner, name, new)
        self._undo.append(lambda: setattr(owner, name, old))

    def _make_call(self, original: Callable) -> Callable:
        observer = self

        def _call(jit_wrapper, is_lower, args, kwargs):
            __tracebackhide__ = True
            return observer._observe(jit_wrapper, is_lower, args, kwargs, original)

        return _call

    def _make_method(self, original: Callable) -> Callable:
        observer = self

        def __call__(jit_wrapper, /, *args, **kwargs):
            __tracebackhide__ = True
            return observer._observe(
                jit_wrapper, False, args, kwargs, lambda w, _, a, k: original(w, *a, **k)
            )

        return __call__

    def _make_combine(self, original: Callable) -> Callable:
        frames = self._stack

        def hashable_combine(*args, **kwargs):
            if frames.frames:
                if frames.frames[-1].probe:
                    raise _reuse.Retraced
                frames.frames[-1].traced = True
            return original(*args, **kwargs)

        return hashable_combine

    def _cleared(self, original: Callable) -> Callable:
        predictor = self.predictor

        def clear_caches(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            finally:
                predictor.cleared()

        return clear_caches

    def _listener(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        del kwargs
        frames = self._stack.frames
        if not (self._listening and frames) or frames[-1].lowering:
            return
        frame = frames[-1]
        if event == COMPILE_EVENT:
            frame.compiled = True
            frame.compile_seconds += duration_secs
        elif event == TRACE_EVENT:
            frame.trace_seconds += duration_secs
            if self.hooks[1] == "jax.monitoring":
                frame.traced = True
        elif event == LOWER_EVENT:
            frame.compiled = True

    # -- per call -----------------------------------------------------------------------------

    def _observe(self, jit_wrapper, is_lower, args, kwargs, original):
        __tracebackhide__ = True
        state = decision = None
        # Under `jax.disable_jit()` the call runs eagerly: nothing is traced or compiled, under
        # Equinox as under eqxstable (a hit, `CacheInfo.hits`), and no JAX cache changes.
        eager = bool(jax.config.jax_disable_jit)  # pyright: ignore[reportAttributeAccessIssue]
        # Observing must not change what the script does: no exception may reach it.
        try:
            with quiet():
                state = self._state(jit_wrapper)
        except (Exception, UserCodeRefused):  # pragma: no cover
            state = None
        if state is not None and state.shadow is not None and not eager:
            # Decided before the call, as a stable wrapper decides: the call may change what
            # the prediction watches (a trace counter, a donated argument). A failure leaves
            # the call counted but not predicted, and the report says so.
            try:
                with quiet():
                    decision = self.predictor.before(state.shadow, args, kwargs)
            except (Exception, UserCodeRefused):
                decision = None
        frames = self._stack.frames
        frame = Frame(lowering=is_lower or eager)
        if not is_lower and decision is not None and self.probes:
            if self.predictor.first_trace(decision):
                frame.inputs = self._inputs(jit_wrapper, decision)
        frames.append(frame)
        error: BaseException | None = None
        try:
            frame.out = out = original(jit_wrapper, is_lower, args, kwargs)
            return out
        except BaseException as e:
            error = e
            raise
        finally:
            frames.pop()
            # A call that raised while its program ran (an `eqx.error_if` failing) is the call
            # it was, a hit or a miss that compiled; one whose trace raised is still a row of
            # the report, with the failure: it may be the only jitted function called.
            if error is not None and ran(frame, error):
                error = None
            if state is not None and (error is None or frame.traced):
                try:
                    if is_lower:
                        if decision is not None and error is None:
                            account_lowered(self, state, frame, jit_wrapper, decision)
                    elif eager:
                        state.record.calls += 1
                    else:
                        account(self, state, frame, jit_wrapper, args, kwargs, decision, error)
                except (Exception, UserCodeRefused):  # pragma: no cover
                    pass

    def _state(self, jit_wrapper: Any) -> CacheState:
        anchor = anchor_of(jit_wrapper)
        state = self._caches.get(id(anchor))
        if state is None:
            fun = self._unwrap(jit_wrapper)
            options = tuple(
                getattr(jit_wrapper, name, None)
                for name in ("donate_first", "donate_rest", "filter_warning")
            )
            # One row for equivalent functions; for a function holding arrays (a module), for
            # those equivalent but for their arrays (the key of their program in eqxstable).
            key: Any = None
            if fun is not None:
                try:
                    if any(map(eqx.is_array, jtu.tree_leaves(fun))):
                        fun_key = static_key(fun, split_fun(fun), donated(options), ())
                    else:
                        fun_key = stable_key((fun, options))
                except UserCodeRefused:
                    # Keying it would run the script's code: a row of its own, unpredicted.
                    fun_key = None
                if fun_key is not None and not key_uses_identity(fun_key):
                    key = fun_key
            # Only the wrappers that `--stabilize` would replace are predicted; the others (made
            # before the doctor started, inside a library) stay as they are.
            replaced = not self.only_made or id(anchor) in self._made
            shadow = None
            if fun is not None and replaced:
                shadow = self.predictor.wrapper(fun, options)
            record = self._record_for(fun, jit_wrapper, key)
            state = CacheState(anchor, record, shadow, replaced)
            record.caches += 1
            self._caches[id(anchor)] = state
        return state

    def _record_for(self, fun: Any, jit_wrapper: Any, key: Any) -> Record:
        record = self._by_fun.get(key) if key is not None else None
        if record is None:
            record = Record(
                fun_name(fun) if fun is not None else getattr(jit_wrapper, "fn", "?"),
                location(fun),
            )
            self.records.append(record)
            if key is not None:
                self._by_fun[key] = record
        return record

    def _unwrap(self, jit_wrapper: Any) -> Any:
        dynamic = getattr(jit_wrapper, "_dynamic_fun", None)
        static = getattr(jit_wrapper, "_static_fun", None)
        if self._combine is not None and static is not None:
            return self._combine(dynamic, static)
        try:
            return jit_wrapper.__wrapped__
        except Exception:
            return None

    def fun_arrays(self, jit_wrapper: Any) -> list:
        """The arrays of the function this call was made with (an Equinox wrapper unflattened
        with new ones holds them as its `_dynamic_fun`), in the order of its leaves."""
        dynamic = getattr(jit_wrapper, "_dynamic_fun", None)
        if type(dynamic) is tuple:
            return [x for x in dynamic if x is not None]
        return [x for x in jtu.tree_leaves(self._unwrap(jit_wrapper)) if eqx.is_array(x)]

    def _inputs(self, jit_wrapper: Any, decision: Decision) -> Any:
        """The fingerprint's input part, before the call runs (`_reuse.inputs`)."""
        try:
            with quiet():
                fun_arrays = self.fun_arrays(jit_wrapper)
                return _reuse.inputs(
                    jit_wrapper, decision.wrapper.which, decision.entry, decision.leaves, fun_arrays
                )
        except (Exception, UserCodeRefused):  # pragma: no cover - the miss then compiles.
            return None

    def probe(self, jit_wrapper: Any, args: tuple, kwargs: dict) -> Callable[[], Any]:
        """Gives the closed jaxpr of the trace Equinox made of this call (`_reuse.probe`), asked
        for once, when first needed."""

        @functools.cache
        def trace() -> Any:
            self._stack.frames.append(Frame(probe=True))
            try:
                return _reuse.probe(jit_wrapper, args, kwargs)
            finally:
                self._stack.frames.pop()

        return trace


# What a compiled program raises while it runs (Equinox re-raises its `error_if` failures as the
# first): the call was dispatched, so it counts as the hit or miss it was.
_RUN_TIME_ERRORS = (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError)


def ran(frame: Frame, error: BaseException) -> bool:
    """Whether a call that raised `error` ran its program: it compiled or lowered one (so its
    trace, if any, returned), or the error is one a running program raises."""
    return frame.compiled or isinstance(error, _RUN_TIME_ERRORS)


class Hooks(NamedTuple):
    call: str
    trace: str


PREFERRED_HOOKS = Hooks("equinox._jit._call", "equinox._jit.hashable_combine")
