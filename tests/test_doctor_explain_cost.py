"""The doctor asks JAX to explain a trace only where it reads the explanation (issue 19, lineax's
selection under the swap). JAX's explanation of a tracing-cache miss makes a key for every entry
of its trace cache, which holds every function traced so far, so its cost grows with the run:
on lineax's own suite the swapped run spent about 3 s more CPU than plain, most of it in garbage
collections of those keys. Inside a `filter_jit` call the doctor reads only which function was
traced (a `jax.jit` traced there and compiled later at top level is that function's compile),
so there JAX explains nothing, and the doctor still knows the function.

Counted, not timed: the `TRACING CACHE MISS` records JAX makes, and the switch as JAX reads it
while it traces inside the call."""

import jax
import jax.numpy as jnp
import pytest
from jax._src import util

import eqxstable as es
from eqxstable._compat import EXPLAINS_JIT_MISSES
from eqxstable._doctor._jax_jit import JaxJitWatch
from eqxstable._jit import current


pytestmark = pytest.mark.skipif(
    not EXPLAINS_JIT_MISSES, reason="this JAX explains its misses otherwise: no switch"
)


class _CountingWatch(JaxJitWatch):
    """The doctor's watch, counting JAX's `TRACING CACHE MISS` records it is shown."""

    def __init__(self):
        super().__init__(lambda: current.call is not None)
        self.explained = 0

    def filter(self, record):
        if record.getMessage().startswith("TRACING CACHE MISS"):
            self.explained += 1
        return super().filter(record)


def _client():
    """A small solver as a client library writes one: a stable `filter_jit` whose body traces
    an inner `jax.jit` and a `lax.while_loop` (two more functions traced per miss). Returns the
    solver, the function it jits inside, and what JAX's switch read while the body traced."""
    read = []

    def matvec(a, x):
        return a @ x

    jitted = jax.jit(matvec)

    def solve(a, b):
        read.append(util.config.explain_cache_misses.value)

        def body(carry):
            i, x = carry
            return i + 1, x + 0.1 * (b - jitted(a, x))

        return jax.lax.while_loop(lambda carry: carry[0] < 3, body, (0, b))[1]

    return es.filter_jit(solve), matvec, read


def test_no_explanation_inside_a_filter_jit_call_and_the_function_still_known():
    solve, matvec, read = _client()
    watch = _CountingWatch()
    assert watch.install()
    try:
        for n in (2, 3, 4, 5):
            # A new shape each time: a miss, tracing `solve`, the loop's two functions and
            # `matvec` (only the first of these at top level).
            solve(jnp.eye(n), jnp.ones(n))
        inside = watch.explained
        # At top level the doctor still asks: a new function is explained, once.
        jax.jit(lambda x: x + 1)(jnp.ones(2))
        top = watch.explained - inside
    finally:
        watch.uninstall()
    # Before: 4 misses x 3 functions of this (user) file explained while the call ran, each
    # making a key for every entry of JAX's trace cache.
    assert inside == 0
    assert read == [False] * 4
    assert top == 1
    # The doctor still knows `matvec` was traced (inside the call): a later top-level compile
    # of what it traced there, which JAX makes without tracing again, is that function's.
    assert "jit(matvec)" in watch._known
    assert any(
        at.endswith(f":{matvec.__code__.co_firstlineno}") for at in watch._known["jit(matvec)"]
    )


def test_the_scripts_own_option_still_explains_inside_a_call():
    # A script that asked for explanations gets them everywhere, as without the doctor.
    solve, _, read = _client()
    watch = _CountingWatch()
    assert watch.install()
    try:
        with jax.explain_cache_misses(True):
            solve(jnp.eye(2), jnp.ones(2))
    finally:
        watch.uninstall()
    assert read == [True]
    assert watch.explained >= 3


def test_jax_reads_its_own_function_again_after_the_watch():
    from jax._src.interpreters import partial_eval

    before = partial_eval.trace_to_jaxpr
    watch = _CountingWatch()
    assert watch.install()
    assert partial_eval.trace_to_jaxpr is not before
    watch.uninstall()
    assert partial_eval.trace_to_jaxpr is before
