"""Guards against recompilation: `max_traces=N`, `on_recompile="warn"/"raise"` and
`with es.no_recompiles():`. They run when a miss is known and before XLA compiles anything."""

import contextlib
import contextvars
import sys
import warnings
from collections.abc import Iterator
from typing import Any, Literal

from .._errors import RecompileError, RecompileWarning
from ._accounting import current, Miss


OnRecompile = Literal["ignore", "warn", "raise"]

_MSG_OVER_MAX_TRACES = (
    "`{name}` would be traced for the {count} time, but it was wrapped with "
    "`es.filter_jit(max_traces={max_traces})`. {reason} Either fix the cause, or raise "
    "`max_traces` if these compilations are expected."
)
_MSG_RECOMPILE_REFUSED = (
    '`{name}` recompiled, and it was wrapped with `es.filter_jit(on_recompile="raise")`. {reason}'
)
_MSG_WARN = "`{name}` recompiled ({kind} at `{path}`): {reason}"
_MSG_FROZEN = (
    "`{name}` would recompile inside `with es.no_recompiles():`. {reason} Move this call out of "
    "the block if the compilation is expected."
)

# A counter rather than a flag, so that nested `no_recompiles()` blocks compose.
_frozen: contextvars.ContextVar[int] = contextvars.ContextVar("eqxstable_no_recompiles", default=0)


@contextlib.contextmanager
def no_recompiles() -> Iterator[None]:
    """Inside the block, a stable [`eqxstable.filter_jit`][] that has already traced once raises
    [`eqxstable.RecompileError`][] instead of tracing again. First calls are allowed.

    **Arguments:** None.

    **Returns:** A context manager.

    !!! example

        ```python
        import jax.numpy as jnp
        import eqxstable as es

        @es.filter_jit
        def step(w, x):
            return w - 0.1 * x

        w = step(jnp.zeros(3), jnp.ones(3))  # compiles
        with es.no_recompiles():
            for x in (jnp.ones(3), 2 * jnp.ones(3)):
                w = step(w, x)  # the same types: no recompile
            try:
                step(w, jnp.ones(4))  # a new shape would recompile: raises instead
            except es.RecompileError as e:
                print(e)
        ```
    """
    token = _frozen.set(_frozen.get() + 1)
    try:
        yield
    finally:
        _frozen.reset(token)


# Blocks whose "first trace" counts from the block's start (the pytest plugin's `no_recompiles`
# fixture): each holds `{id(stats): (stats, misses before the block)}` of the wrappers then alive.
_blocks: contextvars.ContextVar[tuple[dict, ...]] = contextvars.ContextVar(
    "eqxstable_no_recompiles_within", default=()
)


@contextlib.contextmanager
def no_recompiles_within() -> Iterator[None]:
    """As `no_recompiles()`, but each stable `filter_jit`'s first trace *inside the block* is
    allowed, whatever it traced before: a test's own first call of a function that an earlier
    test compiled for other types. A second trace inside the block raises `RecompileError`."""
    from ._accounting import live_wrappers

    baseline = {id(w._stats): (w._stats, _missed(w._stats)) for w in live_wrappers}
    token = _blocks.set((*_blocks.get(), baseline))
    try:
        yield
    finally:
        _blocks.reset(token)


def _missed(stats: Any) -> int:
    # How many misses the wrapper made: the same number `check` is given as `traced_before`.
    missed = getattr(stats, "missed", None)
    return missed if isinstance(missed, int) else len(stats.misses)


def _traced_within(traced_before: int) -> bool:
    """Whether the calling wrapper already traced inside an enclosing `no_recompiles_within()`."""
    blocks = _blocks.get()
    call = current.call if blocks else None
    if call is None:
        return False
    for baseline in blocks:
        stats, before = baseline.get(id(call.stats), (None, 0))
        if stats is not call.stats or before > traced_before:
            # Made inside the block, or its counts were cleared (`cache_clear()`) since.
            before = 0
        if traced_before - before >= 1:
            return True
    return False


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _user_stacklevel() -> int:
    """The `stacklevel` that points a warning at the user's line: the frame that called the
    wrapper, found by walking out of this package and out of JAX."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(("eqxstable._jit", "jax", "jaxlib", "equinox", "contextlib")):
            return level
        frame = frame.f_back
        level += 1
    return 1


def check(
    name: str,
    miss: Miss,
    traced_before: int,
    max_traces: int | None,
    on_recompile: OnRecompile,
) -> None:
    """Raises or warns for `miss`, the miss after `traced_before` earlier ones, as the wrapper's
    options and any enclosing `no_recompiles()` block say."""
    count = traced_before + 1
    if max_traces is not None and count > max_traces:
        raise RecompileError(
            _MSG_OVER_MAX_TRACES.format(
                name=name, count=_ordinal(count), max_traces=max_traces, reason=miss.reason
            )
        )
    if traced_before == 0:
        return
    if _frozen.get() or _traced_within(traced_before):
        raise RecompileError(_MSG_FROZEN.format(name=name, reason=miss.reason))
    if on_recompile == "raise":
        raise RecompileError(_MSG_RECOMPILE_REFUSED.format(name=name, reason=miss.reason))
    if on_recompile == "warn":
        warnings.warn(
            _MSG_WARN.format(name=name, kind=miss.kind, path=miss.path, reason=miss.reason),
            RecompileWarning,
            stacklevel=_user_stacklevel(),
        )
