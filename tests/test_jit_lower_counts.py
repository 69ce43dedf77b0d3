"""`.lower(...)` and `.compile()` of a stable `filter_jit`, then calls: one trace compiles once,
whatever the order, and `cache_info()` agrees with two witnesses (a `nonlocal` trace counter and
JAX's compile log): `compiles <= traces`."""

import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es

from .helpers import compile_log


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


def _counted(name: str):
    traces = 0

    def f(x, k):
        nonlocal traces
        traces += 1
        return x * k

    f.__name__ = f.__qualname__ = name
    return es.filter_jit(f), lambda: traces


@pytest.mark.counts_traces
@pytest.mark.parametrize("order", ["compile_then_call", "call_then_compile"])
def test_a_lowered_trace_compiles_once(order):
    # A `.lower()`, its `.compile()` and a call of the same arguments: JAX keeps the executable
    # with the lowering, which the call shares, so XLA compiles once. The wrapper counted a
    # second compile where the call came before the `.compile()` (1 trace, 2 compiles).
    name = f"lowered_{order}"
    jitted, traces = _counted(name)
    x = jnp.ones(3)
    with compile_log() as log:
        lowered = jitted.lower(x, 2)
        if order == "compile_then_call":
            compiled = lowered.compile()
            out = jitted(x, 2)
        else:
            out = jitted(x, 2)
            compiled = lowered.compile()
        np.testing.assert_allclose(compiled(x, 2), 2.0)
    np.testing.assert_allclose(out, 2.0)
    info = jitted.cache_info()
    assert traces() == 1 and log.count(name) == 1
    assert (info.hits, info.misses, info.traces, info.compiles) == (1, 1, 1, 1)
    assert info.compile_seconds > 0
    # A later miss is counted as ever: one trace, one compile.
    with compile_log() as log:
        np.testing.assert_allclose(jitted(x, 3), 3.0)
    info = jitted.cache_info()
    assert traces() == 2 and log.count(name) == 1
    assert (info.hits, info.misses, info.traces, info.compiles) == (1, 2, 2, 2)


@pytest.mark.counts_traces
def test_a_compile_with_options_is_not_the_wrappers_program():
    # With compiler options `.compile()` makes a program of its own, which the wrapper's calls
    # never run: JAX compiles the trace again, without them, at the first call. That one is the
    # wrapper's compile; the one with options is not counted (`compiles <= traces`).
    jitted, traces = _counted("lowered_with_options")
    x = jnp.ones(3)
    with compile_log() as log:
        compiled = jitted.lower(x, 2).compile({"xla_embed_ir_in_executable": True})
        np.testing.assert_allclose(compiled(x, 2), 2.0)
        assert jitted.cache_info().compiles == 0
        np.testing.assert_allclose(jitted(x, 2), 2.0)
        np.testing.assert_allclose(jitted(x, 2), 2.0)
    info = jitted.cache_info()
    assert traces() == 1 and log.count("lowered_with_options") == 2
    assert (info.hits, info.misses, info.traces, info.compiles) == (2, 1, 1, 1)
    assert info.compile_seconds > 0


@pytest.mark.counts_traces
def test_a_second_compile_of_one_lowering_counts_nothing():
    jitted, traces = _counted("lowered_twice")
    x = jnp.ones(3)
    with compile_log() as log:
        lowered = jitted.lower(x, 2)
        lowered.compile()
        lowered.compile()
        jitted.lower(x, 2).compile()
        jitted(x, 2)
    info = jitted.cache_info()
    assert traces() == 1 and log.count("lowered_twice") == 1
    assert (info.misses, info.traces, info.compiles) == (1, 1, 1)
