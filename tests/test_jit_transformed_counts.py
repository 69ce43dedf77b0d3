"""Calls of a stable `filter_jit` under transformations and inside other traces: `cache_info()`
counts what JAX compiles (its own compile events), `compiles` and `compile_seconds` agree, and
a miss is explained by what changed, not by the tracers' missing sharding."""

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest
from jax.core import Tracer

import eqxstable as es
from eqxstable._jit import COMPILE_EVENT


_compiled: list[str] = []


def _on_event(event: str, duration_secs: float, **kwargs: str | int) -> None:
    del duration_secs, kwargs
    if event == COMPILE_EVENT:
        _compiled.append(event)


jax.monitoring.register_event_duration_secs_listener(_on_event)


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


def _agrees(info: es.CacheInfo) -> None:
    # Seconds of compiling if and only if something was compiled.
    assert (info.compiles > 0) == (info.compile_seconds > 0)
    assert info.compiles <= info.traces


@pytest.mark.counts_traces
def test_a_static_change_under_grad_is_explained_as_static():
    @es.filter_jit
    def scaled(x, k):
        return x * k

    x = jnp.ones(2)
    scaled(x, 0)
    grads = jax.grad(lambda y: scaled(y, 1).sum())(x)
    np.testing.assert_array_equal(np.asarray(grads), [1.0, 1.0])
    miss = scaled.misses[-1]
    # A tracer has no sharding: not a difference, so the static argument is the one named.
    assert (miss.kind, miss.path) == ("static", "args[1]")
    assert "sharding" not in miss.reason and "device_put" not in miss.reason


@pytest.mark.counts_traces
def test_a_call_under_compile_time_eval_inside_a_trace_compiles_and_counts():
    traces = 0

    def times_five(y):
        nonlocal traces
        traces += 1
        return y * 5

    inner = es.filter_jit(times_five)
    during = []

    def outer_fun(x):
        with jax.ensure_compile_time_eval():
            before = len(_compiled)
            constant = inner(np.ones(3, np.float32))
            during.append(len(_compiled) - before)
        # It ran: a concrete array, not a tracer of the outer trace.
        assert not isinstance(constant, Tracer)
        return x + constant

    out = es.filter_jit(outer_fun)(jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(out), [6.0, 6.0, 6.0])
    info = inner.cache_info()
    assert during == [1] and traces == 1
    assert (info.misses, info.traces, info.compiles) == (1, 1, 1)
    assert inner.misses[0].compiled and "traced and compiled" in inner.misses[0].reason
    _agrees(info)


@pytest.mark.counts_traces
@pytest.mark.parametrize("how", ["eval_shape", "grad", "vmap"])
def test_a_compile_at_top_level_of_a_transformed_trace_counts(how):
    x = jnp.ones(3)
    traces = 0

    def sine(z):
        nonlocal traces
        traces += 1
        return jnp.sin(z) * 2.0

    wrapper = es.filter_jit(sine)
    if how == "eval_shape":
        jax.eval_shape(wrapper, x)
    elif how == "grad":
        jax.grad(lambda z: wrapper(z).sum())(x)
    else:
        jax.vmap(wrapper)(x[None])
    info = wrapper.cache_info()
    # Traced under the transformation: a miss, and no program of this wrapper's compiled (what
    # JAX derives from it, a JVP or a batched program, is not counted, seconds included).
    assert (info.misses, info.traces, info.compiles, info.compile_seconds) == (1, 1, 0, 0.0)
    assert not wrapper.misses[0].compiled
    before = len(_compiled)
    out = wrapper(x)
    xla = len(_compiled) - before
    np.testing.assert_allclose(np.asarray(out), np.sin(np.ones(3)) * 2.0, rtol=1e-6)
    info = wrapper.cache_info()
    # JAX compiles the trace it kept, without tracing again: a compile with no miss.
    assert xla == 1 and traces == 1
    assert (info.hits, info.misses, info.traces, info.compiles) == (1, 1, 1, 1)
    _agrees(info)
    wrapper(x)
    assert wrapper.cache_info().compiles == 1
