"""Equinox's debug mode, `EQX_ON_ERROR=breakpoint`: Equinox replaces `jax.jit` with a plain
function that runs the jitted function inline when it is called inside another jitted function
(to work around JAX issue #16732: a breakpoint inside a nested jit) and jits it otherwise.

Such a function has no `.trace` or `.lower`, which the stable cache needs (a miss traces before
it compiles), so every program is JAX's own `jax.jit` (`real_jit`, the one Equinox replaced), and
under that mode it is wrapped in `Inlining`, which does what Equinox's replacement does: inside
another jitted function the body runs inline (`inlined()`), as under `jax.disable_jit()` (no
miss, nothing compiled, the function's own output), with the same warning; anywhere else the
program is called as always. Without that mode nothing here runs on a call.
"""

import threading
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.core import Tracer


try:
    # `jax.jit` itself, which Equinox's debug mode replaces with a plain function.
    from jax._src.api import jit as real_jit
except ImportError:  # pragma: no cover - moved: whatever `jax.jit` is now.
    real_jit = jax.jit


MSG_INLINED = (
    "`eqxstable.filter_jit`: `{name}` was called inside another jitted function while "
    "`EQX_ON_ERROR=breakpoint` is set, so it runs inline there (as `equinox.filter_jit` does "
    "then, to work around JAX issue #16732) and compiles no program of its own."
)


class _Inline(threading.local):
    # The body running inline now in this thread, if any.
    body: Any = None


_inline = _Inline()


def replaced() -> bool:
    """Whether `jax.jit` is not JAX's own now (Equinox's debug mode replaced it)."""
    return jax.jit is not real_jit


def inlined(body: Any) -> bool:
    """Whether `body` runs inline now, not traced by JAX (read by the body when it runs)."""
    return _inline.body is body


def _jitting() -> bool:
    # The test Equinox's replacement makes: a new constant is a tracer only while a jitted
    # function is being traced (not under `jax.grad` or `jax.vmap` alone).
    return isinstance(jnp.asarray(1) + 1, Tracer)


class Inlining:
    """A program's `jax.jit` under Equinox's debug mode: inline inside another jitted function,
    the program anywhere else. Everything else (`.trace`, `.lower`) is the program's."""

    __slots__ = ("jitted", "body", "name")

    def __init__(self, body: Callable, jitted: Any, name: str):
        # The test compiles two small programs the first time it runs eagerly: here, rather
        # than inside a call, whose counters would take them for its own.
        _jitting()
        self.body = body
        self.jitted = jitted
        self.name = name

    def __call__(self, *args: Any) -> Any:
        previous = _inline.body
        if _jitting():
            warnings.warn(MSG_INLINED.format(name=self.name), stacklevel=3)
            _inline.body = self.body
            try:
                return self.body(*args)
            finally:
                _inline.body = previous
        # A trace of this program here (inside an inline body, under
        # `jax.ensure_compile_time_eval()`) is a real one.
        _inline.body = None
        try:
            return self.jitted(*args)
        finally:
            _inline.body = previous

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jitted, name)
