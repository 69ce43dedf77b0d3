"""The pytest plugin counts every trace made during a test, even when the test clears the
counters it would otherwise read (`f.cache_clear()`, `es.clear_caches()`; issue 21)."""

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
