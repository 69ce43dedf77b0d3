"""A typing form whose `==` ignores the order of its arguments (`int | float == float | int`)
is keyed with its arguments in order: code reads them in order (`typing.get_args`)."""

import typing

import jax.numpy as jnp
import pytest

import eqxstable as es


def first_is_int(t, x):
    return x * (2.0 if typing.get_args(t)[0] is int else 3.0)


FORMS = {
    "UnionType": (int | float, float | int),
    "Union": (typing.Union[int, float], typing.Union[float, int]),  # noqa: UP007
    "Literal": (typing.Literal[1, 2], typing.Literal[2, 1]),
}


@pytest.mark.parametrize("name", list(FORMS))
def test_argument_order_is_keyed(name):
    a, b = FORMS[name]
    assert a == b
    assert es.stable_key(a) != es.stable_key(b)
    assert es.stable_key(a) == es.stable_key(FORMS[name][0])


@pytest.mark.counts_traces
def test_a_program_per_order():
    traces = 0

    def f(t, x):
        nonlocal traces
        traces += 1
        return first_is_int(t, x)

    w = es.filter_jit(f)
    one = jnp.float32(1.0)
    assert float(w(int | float, one)) == 2.0
    assert float(w(float | int, one)) == 3.0
    assert float(w(int | float, one)) == 2.0
    assert traces == 2
