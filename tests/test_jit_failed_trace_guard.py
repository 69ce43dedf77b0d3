"""A call whose trace raised (a user's shape error) counts as a trace, as
`eqx.debug.assert_max_traces` counts it (docs/jit.md), but compiles nothing: the guards that
refuse the corrected call, and the miss it records when allowed, name the failed trace and what
differs from it, never "first call ... traced and compiled" (attack 12b-06)."""

import jax.numpy as jnp
import pytest

import eqxstable as es


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


def _matmul_counted():
    traces = 0

    def matmul(x, y):
        nonlocal traces
        traces += 1
        return x @ y

    return matmul, lambda: traces


@pytest.mark.parametrize("options", [{"max_traces": 1}, {"on_recompile": "raise"}])
def test_the_corrected_call_is_refused_naming_the_failed_trace(options):
    fun, traces = _matmul_counted()
    f = es.filter_jit(fun, **options)
    with pytest.raises(TypeError):
        f(jnp.ones((2, 3)), jnp.ones((2, 3)))
    assert traces() == 1
    assert f.misses[0].reason.endswith("traced, and the trace raised (no compile).")
    with pytest.raises(es.RecompileError) as info:
        f(jnp.ones((2, 3)), jnp.ones((3, 2)))
    msg = str(info.value)
    assert "first call" not in msg
    assert "compiled." not in msg.replace("compiled nothing", "")
    assert "that trace raised and compiled nothing" in msg
    assert "`args[1]` changed shape: float32[2, 3] -> float32[3, 2]" in msg
    # Refused before tracing: nothing more counted.
    assert traces() == 1
    assert f.cache_info()[:2] == (0, 1)


def test_an_allowed_corrected_call_records_what_differs_from_the_failed_trace():
    fun, traces = _matmul_counted()
    f = es.filter_jit(fun, max_traces=2)
    with pytest.raises(TypeError):
        f(jnp.ones((2, 3)), jnp.ones((2, 3)))
    out = f(jnp.ones((2, 3)), jnp.ones((3, 2)))
    assert jnp.array_equal(out, jnp.full((2, 2), 3.0))
    assert traces() == 2
    failed, corrected = f.misses
    assert not failed.compiled and corrected.compiled
    assert corrected.kind == "first"
    assert corrected.reason.startswith("`matmul` was traced before, but that trace raised")
    assert "`args[1]` changed shape" in corrected.reason
    # A later new shape is explained against the program that compiled, not the failed trace.
    f2 = es.filter_jit(fun, max_traces=3)
    f2(jnp.ones((2, 3)), jnp.ones((3, 4)))
    assert "changed shape" in f2.misses[-1].reason
    assert "raised" not in f2.misses[-1].reason


def test_the_same_arguments_again_after_a_failed_trace_say_so():
    fun, traces = _matmul_counted()
    f = es.filter_jit(fun)
    for _ in range(2):
        with pytest.raises(TypeError):
            f(jnp.ones((2, 3)), jnp.ones((2, 3)))
    assert traces() == 2
    again = f.misses[1]
    assert not again.compiled
    assert again.reason == (
        "`matmul` was traced before, but that trace raised and compiled nothing; this call has "
        "the same arguments as that one."
    )
