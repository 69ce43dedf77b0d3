"""Verify mode compares the non-array part of an output too (attack 9b-12): a hit returns the
program's traced non-array leaves, so a Python value the trace read from state the keys take as
constant (NumPy's print options, behind library code) came back stale with no
`es.StaleProgramError`, although the retrace saw the new value. Leaves a trace makes afresh
(an equivalent lambda, an equal value) and the call's own static inputs verify clean."""

import contextlib

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


@contextlib.contextmanager
def _precision(value):
    before = np.get_printoptions()
    np.set_printoptions(precision=value)
    try:
        yield
    finally:
        np.set_printoptions(**before)


def _reads_precision(x):
    return x * 2, {"precision": np.get_printoptions()["precision"]}


def test_a_stale_static_output_raises_naming_its_path():
    es.clear_caches()
    f = es.filter_jit(_reads_precision, verify=True)
    x = jnp.ones(2)
    with _precision(8):
        out, info = f(x)
        assert info == {"precision": 8} and out.tolist() == [2.0, 2.0]
        assert f(x)[1] == {"precision": 8}
    with _precision(3):
        with pytest.raises(es.StaleProgramError, match=r"output\[1\]\['precision'\]") as e:
            f(x)
    assert "`3` (int)" in str(e.value) and "`8` (int)" in str(e.value)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12))
def test_raises_exactly_when_the_value_changed(first, second):
    # The program of an earlier example, traced under its own precision, would be served too.
    es.clear_caches()
    f = es.filter_jit(_reads_precision, verify=True)
    x = jnp.ones(1)
    with _precision(first):
        assert f(x)[1]["precision"] == first
    with _precision(second):
        if first == second:
            assert f(x)[1]["precision"] == second
        else:
            with pytest.raises(es.StaleProgramError):
                f(x)


def test_fresh_equivalent_and_returned_static_outputs_verify_clean():
    def f(x, scale, name):
        # A lambda made afresh by each trace (equal `stable_key`), a new tuple of equal
        # values, and the call's own static inputs returned.
        return x * scale, (lambda y: y + 1), (name, 1.5, True), scale, name

    wrapper = es.filter_jit(f, verify=True)
    x = jnp.ones(2)
    first = wrapper(x, 2.0, "a")
    values = ()
    for _ in range(3):
        out, fn, values, scale, name = wrapper(x, 2.0, "a")
        assert out.tolist() == [2.0, 2.0] and fn(1) == 2
        assert values == ("a", 1.5, True) and type(scale) is float and name == "a"
    assert first[2] == values
    info = wrapper.cache_info()
    assert (info.hits, info.misses) == (3, 1)


class _Marker:
    """No `==` of its own: keyed by identity."""

    def __init__(self, name):
        self.name = name


_F_OUT, _G_OUT = _Marker("f"), _Marker("g")


@pytest.mark.parametrize("first_verified", [False, True])
def test_a_program_shared_with_another_function_verifies_against_its_own_output(
    first_verified,
):
    # Attack round 14b, finding 04: `g` reuses `f`'s program (the same jaxpr), and its
    # first verified hit took the non-array output from JAX's cached trace, which is `f`'s:
    # a false `StaleProgramError` naming `f`'s marker, where `g` returns its own.
    @es.filter_jit(verify=first_verified)
    def f(x):
        return x + 1, _F_OUT

    @es.filter_jit(verify=True)
    def g(x):
        return x + 1, _G_OUT

    x = jnp.ones(1)
    assert f(x)[1] is _F_OUT and f(x)[1] is _F_OUT
    for _ in range(3):
        out, marker = g(x)
        assert marker is _G_OUT and float(out[0]) == 2.0
    assert f(x)[1] is _F_OUT
