"""Guards of the stable `filter_jit`: `max_traces`, `on_recompile` and `no_recompiles()`. They
refuse before the user's function is traced, and a refused call leaves no accounting behind."""

import warnings

import jax.numpy as jnp
import pytest

import eqxstable as es

from .helpers import compile_log, count_traces


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


def _scale(x, n):
    return x * n


def test_max_traces_raises_with_the_reason_and_leaves_nothing_behind():
    counter = count_traces(_scale)
    jitted = es.filter_jit(counter, max_traces=2)
    jitted(jnp.ones(3), 1)
    jitted(jnp.ones(3), 2)
    with compile_log() as log:
        with pytest.raises(
            es.RecompileError,
            match=r"(?s)traced for the 3rd time.*max_traces=2.*`args\[1\]` changed: int 2 -> int 3",
        ):
            jitted(jnp.ones(3), 3)
    assert counter.count == 2
    assert log.count("_scale") == 0
    assert jitted.cache_info()[:2] == (0, 2)
    # Cached programs still run, and the refused call can be refused again.
    jitted(jnp.ones(3), 1)
    with pytest.raises(es.RecompileError):
        jitted(jnp.ones(3), 3)
    assert jitted.cache_info()[:2] == (1, 2)
    assert len(jitted.misses) == 2


def test_on_recompile_warn_points_at_the_caller():
    jitted = es.filter_jit(_scale, on_recompile="warn")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jitted(jnp.ones(3), 1)  # the first trace never warns
    with pytest.warns(es.RecompileWarning, match=r"static at `args\[1\]`.*int 1 -> int 2") as rec:
        jitted(jnp.ones(3), 2)
    assert rec[0].filename == __file__
    assert jitted.cache_info()[:2] == (0, 2)


def test_on_recompile_raise():
    counter = count_traces(_scale)
    jitted = es.filter_jit(counter, on_recompile="raise")
    jitted(jnp.ones(3), 1)
    with pytest.raises(es.RecompileError, match=r'on_recompile="raise".*`args\[0\]` changed shape'):
        jitted(jnp.ones(4), 1)
    assert counter.count == 1


@pytest.mark.counts_traces
def test_no_recompiles_allows_first_traces_only():
    counter = count_traces(_scale)
    jitted = es.filter_jit(counter)
    other = es.filter_jit(count_traces(_scale))
    jitted(jnp.ones(3), 1)
    with es.no_recompiles():
        jitted(jnp.ones(3), 1)
        other(jnp.ones(3), 1)  # never traced before: allowed
        with pytest.raises(es.RecompileError, match=r"inside `with es.no_recompiles\(\):`"):
            jitted(jnp.ones(3), 2)
        with es.no_recompiles():
            with pytest.raises(es.RecompileError):
                other(jnp.ones(5), 1)
    jitted(jnp.ones(3), 2)  # outside the block it compiles again
    assert counter.count == 2


@pytest.mark.counts_traces
def test_a_trace_that_raises_is_counted():
    # As `eqx.debug.assert_max_traces` counts it: the function was traced, even if it raised.
    traces = 0

    def fails(x, n):
        nonlocal traces
        traces += 1
        if n == 0:
            raise ZeroDivisionError("n is zero")
        return x / n

    jitted = es.filter_jit(fails, max_traces=2)
    with pytest.raises(ZeroDivisionError, match="n is zero"):
        jitted(jnp.ones(2), 0)
    assert jitted.cache_info()[:2] == (0, 1)
    assert jitted.misses[0].kind == "first"
    jitted(jnp.ones(2), 1)
    assert jitted.cache_info()[:2] == (0, 2)
    assert traces == 2
    # The third trace is refused before the function runs.
    with pytest.raises(es.RecompileError):
        jitted(jnp.ones(2), 0)
    assert traces == 2
    assert jitted.cache_info()[:2] == (0, 2)
