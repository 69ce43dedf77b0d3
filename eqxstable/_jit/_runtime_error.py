"""`equinox.error_if` failures inside a stable `filter_jit` raise `equinox.EquinoxRuntimeError`
with Equinox's own guidance, as under `equinox.filter_jit`.

Equinox's check runs as a host callback that records its message and the stack it was traced
from (`equinox._jit.last_error_info`) and raises; XLA then reports a `JaxRuntimeError` (or a
`ValueError`) whose text is mostly noise. `equinox.filter_jit` replaces that error with an
`EquinoxRuntimeError`, and hides JAX's "jax.pure_callback failed" log record while its call runs.
This module does the same for the stable wrapper, reading what Equinox recorded.

The stack Equinox records is cut where the calling `filter_jit` frame starts: Equinox finds that
frame by its local `__equinox_jit_id__` (a `bytes`), which the stable wrapper also sets.
"""

import logging
import os
from typing import Any

import equinox as eqx
import equinox._jit as eqx_jit
import jax
from jax.extend import core as jcore

from ._accounting import current


# What JAX raises for a failed host callback: `JaxRuntimeError` since JAX 0.4.34, before that
# jaxlib's `XlaRuntimeError` (read only then: its old location warns in newer versions).
_JaxRuntimeError: Any = getattr(jax.errors, "JaxRuntimeError", None)
if _JaxRuntimeError is None:  # pragma: no cover
    from jaxlib.xla_extension import XlaRuntimeError as _JaxRuntimeError  # pyright: ignore
_RUNTIME_ERRORS: tuple[type[BaseException], ...] = (_JaxRuntimeError, ValueError)
# Equinox's own class for these errors (public since Equinox 0.11.4).
EquinoxRuntimeError: type[Exception] = getattr(eqx, "EquinoxRuntimeError", RuntimeError)
# The marker Equinox puts in the message of the error its callback raises.
_MARKER = "_EquinoxRuntimeError: "
_MSG_FALLBACK = (
    "Above is the stack outside of JIT. Below is the stack inside of JIT:\n{stack}\n"
    "equinox.EquinoxRuntimeError: {msg}\n\n"
    "An `equinox.error_if` check failed while the compiled program ran. Set the environment "
    "variable `EQX_ON_ERROR=breakpoint` to open a debugger where it failed, or `JAX_DISABLE_JIT=1` "
    "to run the program as plain Python."
)


# Host callbacks whose failure raises: `equinox.error_if` runs as a `pure_callback`.
_RAISING_CALLBACKS = frozenset({"pure_callback", "io_callback"})


def raises_at_run_time(program: Any, entry: Any, donated: list, kept: list, dynamic: Any) -> bool:
    """Whether the program just compiled for `entry` can raise while it runs (it holds a host
    callback, as every `equinox.error_if` check does).

    `equinox.filter_jit` waits for every call to finish, so that such an error is raised by the
    call itself; the stable wrapper waits only for programs that can raise. The jaxpr comes from
    JAX's trace cache (the call just traced it), so the function is not run again.
    """
    try:
        closed = program.jitted.trace(donated, kept, dynamic, entry).jaxpr
    except Exception:
        return False
    return _has_callback(closed.jaxpr)


def _has_callback(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _RAISING_CALLBACKS:
            return True
        for value in eqn.params.values():
            for sub in value if type(value) is tuple else (value,):
                if isinstance(sub, jcore.ClosedJaxpr):
                    sub = sub.jaxpr
                if isinstance(sub, jcore.Jaxpr) and _has_callback(sub):
                    return True
    return False


def new_jit_id() -> bytes:
    """A fresh value for a wrapper's `__equinox_jit_id__` frame local."""
    return os.urandom(16)


def equinox_error(error: BaseException, jit_id: bytes) -> Exception | None:
    """The `EquinoxRuntimeError` to raise instead of `error`, or `None` when `error` did not come
    from an Equinox runtime check.

    **Arguments:**

    - `error`: what calling the compiled program raised.
    - `jit_id`: the `__equinox_jit_id__` of the wrapper's frame: the recorded stack is shown up
        to that frame, the stack inside the jitted function.

    **Returns:**

    The error to raise (`from None`, as the noise of the original helps nobody), or `None`.
    """
    if not isinstance(error, _RUNTIME_ERRORS):
        return None
    info = getattr(eqx_jit, "last_error_info", None)
    if info is None or _MARKER not in str(error):
        return None
    msg, stack = info
    pieces: list[str] = []
    for item in stack:
        if type(item) is str:
            pieces.append(item)
        elif item == jit_id:
            break
    template: Any = getattr(eqx_jit, "_on_error_msg", _MSG_FALLBACK)
    return EquinoxRuntimeError(template.format(msg=msg, stack="".join(reversed(pieces))))


class _QuietCallbackFailures(logging.Filter):
    """Hides JAX's "jax.pure_callback failed" record (an ERROR with the callback's traceback)
    while a stable `filter_jit` call runs in this thread, as `equinox.filter_jit` does during its
    calls: the error that the call raises says it all. Other threads and calls are untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            current.call is not None
            and record.name == "jax._src.callback"
            and record.getMessage() == "jax.pure_callback failed"
        )


# Installed once, rather than around each call as Equinox does, to keep the hit path free of it.
logging.getLogger("jax._src.callback").addFilter(_QuietCallbackFailures())
