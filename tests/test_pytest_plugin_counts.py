"""The pytest plugin counts every trace made during a test, even when the test clears the
counters it would otherwise read (`f.cache_clear()`, `es.clear_caches()`; issue 21), and only
traces: the programs JAX compiles from a trace it already made (a gradient's) are none."""

import pytest

# Imported here, before `pytester` snapshots `sys.modules`: a jit layer first imported inside a
# run is dropped after it, and the next run would mix two copies of it.
import eqxstable._jit  # noqa: F401


_HEADER = """
import jax.numpy as jnp
import pytest

import eqxstable as es
"""


def test_max_traces_counts_traces_across_clears(pytester: pytest.Pytester):
    pytester.makepyfile(
        _HEADER
        + """
@pytest.mark.max_traces(1)
def test_cleared():
    f = es.filter_jit(lambda x: x * 2)
    f(jnp.ones(2))
    f.cache_clear()
    f(jnp.ones(2))
    es.clear_caches()
    f(jnp.ones(2))
    f.cache_clear()
    f(jnp.ones(2))
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*traced 4 time(s) during this test*"])


_GRADS = """
import equinox as eqx
import jax

traced = []


def make(jit):
    @jit
    def f(x):
        traced.append(1)
        return jnp.sin(x).sum()

    return f


@pytest.mark.max_traces(1)
@pytest.mark.parametrize("jit", [eqx.filter_jit, jax.jit, es.filter_jit])
def test_grad_of_one_trace(jit):
    traced.clear()
    f = make(jit)
    x = jnp.ones(3)
    f(x)
    jax.grad(f)(x)
    jax.grad(f)(x)
    assert len(traced) == 1


@pytest.mark.max_traces(1)
@pytest.mark.parametrize("jit", [eqx.filter_jit, jax.jit, es.filter_jit])
def test_two_traces(jit):
    # Shapes no earlier test traced: the log `traced` is only appended to, so it is no part of
    # the key, and a stable wrapper of `make`'s function reuses the programs of the test above.
    f = make(jit)
    f(jnp.ones(5))
    jax.grad(f)(jnp.ones(6))
"""


# Counts traces: verify mode, which the in-process run inherits, traces every hit again.
@pytest.mark.counts_traces
def test_max_traces_counts_no_gradient_compiles(pytester: pytest.Pytester):
    # Attack 9b-07: a gradient of an `equinox.filter_jit` or `jax.jit` function traced once
    # compiles JAX's derived programs, which the marker counted as traces and failed the test.
    from eqxstable._compat import EXPLAINS_JIT_MISSES

    pytester.makepyfile(_HEADER + _GRADS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "error")
    # A second trace (a new shape under the gradient) still fails, but for a `jax.jit` on a JAX
    # whose misses the doctor cannot read.
    result.assert_outcomes(passed=3 + (not EXPLAINS_JIT_MISSES), failed=2 + EXPLAINS_JIT_MISSES)
    result.stdout.fnmatch_lines(["*traced 2 time(s) during this test:*"])
    # The failure lists the traces only, not the compiles of the gradients.
    assert "from an earlier trace" not in result.stdout.str()
