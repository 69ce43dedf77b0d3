"""A program is reused by jaxpr only where it was compiled with the same `jax.jit` options, by
their contents as compiled (attack 15-01): a `compiler_options` dict changed in place between two
wrappers made the second run the executable compiled with the old options (`nan * 0` gave `0`
under the old fast math, where `equinox.filter_jit` and `jax.jit` give `nan`). XLA's CPU fast
math is the option a result shows: with it, `x * 0.0` folds to `0.0` for a NaN or an infinity."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es
from eqxstable._jit._fingerprint import AVAILABLE as REUSES


X = jnp.array([np.nan, 1.0, np.inf], dtype=jnp.float32)
FAST = "xla_cpu_enable_fast_math"
# Older XLA (JAX 0.5's) keeps the NaN under fast math: no result shows the option there.
SHOWN = (
    np.asarray(jax.jit(lambda x: x * 0.0, compiler_options={FAST: True})(X)).tolist() == [0.0] * 3
)
NEEDS_FAST_MATH = pytest.mark.skipif(not SHOWN, reason="this XLA's fast math keeps NaN * 0")
NEEDS_REUSE = pytest.mark.skipif(not REUSES, reason="no reuse by jaxpr on this JAX (`_compat`)")


def _times_zero(x):
    return x * 0.0


def _times_zero_too(x):
    return x * 0.0


def _run(fn: Callable, options: dict[str, Any]) -> tuple[np.ndarray, bool]:
    w = es.filter_jit(fn, compiler_options=options)
    out = np.asarray(w(X))
    # Equinox's typed overloads leave out the `**jitkwargs` its `filter_jit` takes.
    want = np.asarray(eqx.filter_jit(fn, compiler_options=options)(X))  # pyright: ignore[reportCallIssue]
    np.testing.assert_array_equal(out, want)
    (miss,) = w.misses
    return out, miss.compiled


@pytest.fixture(autouse=True)
def _fresh():
    es.clear_caches()


@NEEDS_FAST_MATH
def test_fast_math_is_seen_on_cpu():
    # The witness: without it, the tests below could not fail.
    fast, _ = _run(_times_zero, {FAST: True})
    slow, _ = _run(_times_zero_too, {FAST: False})
    assert fast.tolist() == [0.0, 0.0, 0.0]
    assert np.isnan(slow[0]) and slow[1] == 0.0 and np.isnan(slow[2])


@NEEDS_FAST_MATH
@pytest.mark.parametrize("second", [_times_zero, _times_zero_too], ids=["same", "another"])
def test_options_changed_in_place_are_another_program(second):
    options = {FAST: True}
    _run(_times_zero, options)
    options[FAST] = False  # The user switches fast math off in the same dict.
    out, compiled = _run(second, options)  # Checked against `equinox.filter_jit` in `_run`.
    assert np.isnan(out[0]) and compiled


@NEEDS_REUSE
def test_equal_options_in_another_dict_still_reuse():
    _run(_times_zero, {FAST: False})
    out, compiled = _run(_times_zero_too, {FAST: False})
    assert np.isnan(out[0]) and not compiled  # The same jaxpr and options: no compile.
