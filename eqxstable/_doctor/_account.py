"""After an `equinox.filter_jit` call (or `.lower()`) the observer saw: the row's counts, the
observed miss explained, and the prediction settled (`_predict.py`): the miss eqxstable's
`filter_jit` would have made, or a hit of Equinox's where it would compile (an added miss)."""

import functools
from typing import Any, TYPE_CHECKING

from .._jit import Miss, not_compiled, signature, under_a_trace
from . import _reuse
from ._explain import added_miss, explain_miss, ObservedMiss
from ._predict import Decision
from ._quiet import MSG_REFUSED, quiet, UserCodeRefused
from ._state import CacheState, Frame


if TYPE_CHECKING:
    from ._observe import Observer


def account(
    observer: "Observer",
    state: CacheState,
    frame: Frame,
    jit_wrapper: Any,
    args: tuple,
    kwargs: dict,
    decision: Decision | None,
    error: BaseException | None = None,
) -> None:
    record = state.record
    record.calls += 1
    record.compile_seconds += frame.compile_seconds
    record.trace_seconds += frame.trace_seconds
    traced = frame.traced or frame.compiled
    predicted = None
    settled = True
    if not state.replaced:
        pass
    elif decision is None:
        record.unpredicted += 1
    else:
        try:
            # Keyed in `quiet()` as `before` keyed the call: the ambient state in the keys
            # (`_jit/_ambient.py`) is then read the same way.
            with quiet():
                settled = observer.predictor.settle(decision, traced)
        except (Exception, UserCodeRefused):  # pragma: no cover - counted, the report says so.
            record.unpredicted += 1
    if settled and not traced:
        return
    with quiet():
        try:
            sig = signature(args, kwargs) if traced else None
        except UserCodeRefused:
            # Keying the arguments would run the script's own code: counted, unexplained.
            record.misses.append(ObservedMiss("first", "", MSG_REFUSED, False, 0.0))
            return
        if not settled:
            assert decision is not None
            try:
                fun_arrays = observer.fun_arrays(jit_wrapper)
                # The signature of the call as made serves when binding changed nothing.
                bound = decision.args is args and decision.kwargs is kwargs
                fingerprint = trace = None
                # What eqxstable's program would make of the output Equinox's trace returned:
                # an entry whose trace made objects is pinned (`_reuse.output_spec`).
                spec = _reuse.OutputSpec()
                if frame.traced and error is None:
                    spec = _reuse.output_spec(
                        frame.out, decision.entry.template, decision.wrapper.parts.template
                    )
                if observer.probes and frame.traced and error is None:
                    trace = observer.probe(jit_wrapper, args, kwargs)
                    if frame.inputs is not None:
                        fingerprint = functools.partial(_reuse.fingerprint, trace, frame, spec)
                late, dropped = observer.predictor.late, observer.predictor.dropped
                reused = observer.predictor.reused
                predicted = observer.predictor.miss(
                    decision,
                    fun_arrays,
                    sig if bound else None,
                    fingerprint,
                    trace,
                    made=bool(spec.made),
                )
                record.late += observer.predictor.late - late
                record.dropped += observer.predictor.dropped - dropped
                record.reused += observer.predictor.reused - reused
            except Exception:  # pragma: no cover - counted, and the report says so.
                record.unpredicted += 1
        if predicted is not None:
            record.predicted.append(predicted)
        if traced:
            assert sig is not None
            new_cache, state.fresh = state.fresh, False
            try:
                miss = explain_miss(
                    record.history,
                    record.name,
                    sig,
                    args,
                    kwargs,
                    frame.compile_seconds,
                    new_cache,
                    predicted,
                    avoidable=decision is not None and predicted is None,
                )
            except Exception as e:  # pragma: no cover - counted even if not explained.
                miss = ObservedMiss("first", "", f"(not explained: {e!r})", False, 0.0)
            if error is not None:
                failure = f"{type(error).__name__}: {error}".splitlines()[0][:200]
                said = "traced, and the trace raised " + failure + " (nothing was compiled)."
                reason = miss.reason.replace("traced and compiled.", said)
                if reason == miss.reason:
                    reason += f" The trace raised {failure} (nothing was compiled)."
                miss = miss._replace(reason=reason, compiled=False)
            elif frame.traced and not frame.compiled and under_a_trace():
                # Traced into an outer trace (an outer `jax.jit`), which compiles it as part of
                # its own program: nothing of this one's compiled, in the jit layer's words
                # for a stable row (attack 13b-07).
                said = Miss(miss.kind, miss.path, miss.reason)  # pyright: ignore[reportArgumentType]
                said = not_compiled(said, 0.0, "inside")
                miss = miss._replace(reason=said.reason, compiled=False)
            if not frame.traced:
                # JAX compiled what it derived from an earlier trace (a gradient under
                # `jax.grad`): a compile, no trace of the function.
                miss = miss._replace(traced=False)
            record.misses.append(miss)
            if not state.replaced:
                # `--stabilize` leaves this wrapper to Equinox: the same miss.
                record.predicted.append(
                    Miss(miss.kind, miss.path, miss.reason, miss.compiled)  # pyright: ignore
                )
        elif predicted is not None:
            record.added.append(added_miss(predicted))


def account_lowered(
    observer: "Observer", state: CacheState, frame: Frame, jit_wrapper: Any, decision: Decision
) -> None:
    """After an Equinox `.lower()`: not a call of Equinox's row, but under `--stabilize` a
    `.lower()` that traces is a miss that compiles nothing (its `.compile()`, or the first call,
    compiles the trace with no miss of its own: `_jit/_lowered.py`)."""
    if not state.replaced:
        return
    record = state.record
    try:
        with quiet():
            predicted = observer.predictor.lowered(
                decision, observer.fun_arrays(jit_wrapper), frame.traced
            )
    except (Exception, UserCodeRefused):  # pragma: no cover - counted, and the report says so.
        record.unpredicted += 1
        return
    if predicted is not None:
        record.predicted.append(predicted)
        record.lowered += 1
