"""Verify mode traces every hit again, which runs the function's Python again (`_verify.py`).
What that trace warns is recorded and dropped, as a hit warns nothing: a test that expects a
trace-time warning on the first call and calls again under `filterwarnings = error` passes in
verify mode as without it (attack 13b-05), and so does a hit under `np.errstate(...="raise")`
of a function whose trace folds a NaN. A trace that catches such a raise and computes something
else is still compared as it is. Other side effects of the function's Python (a counter it
bumps) do happen again: verify mode's documented cost."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es


def _warns(x):
    warnings.warn("`_warns` is deprecated", DeprecationWarning)  # at trace time
    return x * 2.0


def test_a_trace_time_warning_is_not_given_again_by_the_retrace():
    run = es.filter_jit(_warns, verify=True)  # pyright: ignore[reportCallIssue]
    with pytest.warns(DeprecationWarning, match="deprecated"):
        run(jnp.ones(3))
    # Under the suite's `filterwarnings = error`, and with every warning recorded: none comes.
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        np.testing.assert_allclose(run(jnp.ones(3)), [2.0, 2.0, 2.0])
    assert shown == []
    np.testing.assert_allclose(run(jnp.ones(3)), [2.0, 2.0, 2.0])


def _folds_nan(x):
    return x + np.log(np.float64(-1.0))


def test_a_hit_under_a_raising_errstate_is_served_as_without_verify():
    run = es.filter_jit(_folds_nan, verify=True)  # pyright: ignore[reportCallIssue]
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        assert np.isnan(run(jnp.ones(2))).all()
    # The same objects: served the program they traced, as `equinox.filter_jit` serves them.
    with np.errstate(invalid="raise"):
        assert np.isnan(run(jnp.ones(2))).all()


def _catches(x):
    try:
        c = np.log(np.float64(-1.0))
    except RuntimeWarning:
        c = np.float64(0.0)
    return x + c


def test_a_trace_that_branches_on_the_filters_is_still_compared():
    run = es.filter_jit(_catches, verify=True)  # pyright: ignore[reportCallIssue]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isnan(run(jnp.ones(2))).all()
    # Traced again now, it would compute 1.0, not NaN: the program is stale under this state.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(es.StaleProgramError, match="_catches"):  # pyright: ignore
            run(jnp.ones(2))


def test_a_counter_the_function_bumps_counts_the_retrace():
    # Documented: verify mode runs the function's Python on every hit. (No `counts_traces`: the
    # wrapper verifies in the suite's normal run as in its verify run, so the count is the same.)
    count = 0

    def counted(x):
        nonlocal count
        count += 1
        return x + 1.0

    run = es.filter_jit(counted, verify=True)  # pyright: ignore[reportCallIssue]
    run(jnp.ones(2))
    run(jnp.ones(2))
    assert count == 2
    assert run.cache_info().misses == 1
