"""A callback's function is a jaxpr parameter that runs with the program: two traces whose
callbacks are only equal by a class's own `==` (`K-own-eq`, never substituted by `intern`) must
not share a program, or the second call would run the first trace's object
(`_fingerprint.param_key`)."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._jit._fingerprint import _Same, AVAILABLE, param_key


pytestmark = pytest.mark.skipif(not AVAILABLE, reason="no reuse by fingerprint on this JAX")


class Sink:
    """Equal by name, as its author chose; what it returns depends on which object it is."""

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is Sink and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __call__(self, x):
        return np.asarray(id(self) % 9973, np.float32)


def _call_sink(sink, n, x):
    # `n` is unused: another value is another static key, and the same jaxpr.
    return jax.pure_callback(sink, jax.ShapeDtypeStruct((), jnp.float32), x)


# Static values never used twice: under both jits, equal static arguments (by the sink's own
# `==`) share a program by design, as `jax.jit` does; only different ones are compared here.
_N = itertools.count()


def _run(jit, sinks: list[Sink]) -> list[bool]:
    f = jit(_call_sink)
    return [float(f(s, next(_N), jnp.float32(1.0))) == id(s) % 9973 for s in sinks]


@settings(max_examples=5, deadline=None)
@given(st.text(max_size=3), st.integers(2, 4))
def test_each_call_runs_its_own_callback_object(name, count):
    es.clear_caches()
    sinks = [Sink(name) for _ in range(count)]
    assert _run(eqx.filter_jit, sinks) == [True] * count
    assert _run(es.filter_jit, sinks) == [True] * count


def test_an_own_eq_callable_is_a_parameter_by_identity():
    a, b = Sink("a"), Sink("a")
    assert type(param_key(a)) is _Same and param_key(a) != param_key(b)
    assert param_key(a) == param_key(a)

    def make(k):
        return lambda v: k * v

    # A function equal by its key (substitutable) still shares.
    assert param_key(make(2.0)) == param_key(make(2.0))
