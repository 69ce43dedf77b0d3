"""`jaxpr_key`: JAX jaxprs keyed by value (what runs), so that a `Jaxpr` held as a static (as
`equinox.filter_closure_convert` holds one, inside lineax's `FunctionLinearOperator`) made twice
for the same computation has one key. Tested with `es.stable_key` as the key of everything else;
and the miss such a static causes today, which is labelled as the identity miss it is."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es
from eqxstable._keys._jaxpr import jaxpr_key

from .helpers import counting_filter_jit


def _key(obj):
    # Both routes: `jaxpr_key` itself, and `es.stable_key`, which reaches it through the rules
    # table with the keys' own context (watches, depth).
    return jaxpr_key(obj, es.stable_key), es.stable_key(obj)


def _converted(fn, *example) -> Any:
    # A closure over an array: Equinox traces it to a jaxpr (with the array as a constant).
    return eqx.filter_closure_convert(fn, *example)


def _closing_over(m, body, example=None):
    return _converted(lambda v: body(m, v), jnp.ones(2) if example is None else example)


def _matvec(m, c=1.0):
    return _closing_over(m, lambda m, v: m @ v + c)


# Made on first use: an array made at import would start JAX's backend at collection, before
# the mutation run forks its workers (tests/README.md).
def _m():
    return jnp.arange(4.0).reshape(2, 2)


def _holds_its_constants(converted) -> bool:
    """Whether the closed-over array is a constant of the converted jaxpr (JAX 0.12, where a
    `Jaxpr` holds its `consts`) rather than an argument Equinox passes to it (older JAX)."""
    return bool(getattr(converted.jaxpr, "consts", ()))


def test_the_same_computation_converted_twice_has_one_key():
    a, b = _matvec(_m()), _matvec(_m())
    assert a.jaxpr is not b.jaxpr
    assert _key(a.jaxpr) == _key(b.jaxpr)
    assert hash(_key(a.jaxpr)) == hash(_key(b.jaxpr))
    # The closed-over array is an argument of the jaxpr, not part of it; or, where the jaxpr
    # holds it as a constant, part of what the jaxpr computes, keyed by its bytes.
    other = _matvec(_m() + 1)
    assert (_key(other.jaxpr) == _key(a.jaxpr)) != _holds_its_constants(a)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (lambda: _matvec(_m(), 1.0), lambda: _matvec(_m(), 2.0)),
        (lambda: _matvec(_m(), 0.0), lambda: _matvec(_m(), -0.0)),
        (lambda: _matvec(_m()), lambda: _closing_over(_m(), lambda m, v: v @ m + 1.0)),
        (lambda: _matvec(_m()), lambda: _closing_over(_m(), lambda m, v: m @ v * 1.0)),
        (
            lambda: _matvec(_m()),
            lambda: _closing_over(_m().astype("f2"), lambda m, v: m @ v + 1.0, jnp.ones(2, "f2")),
        ),
        (
            lambda: _matvec(_m()),
            lambda: _closing_over(_m(), lambda m, v: m @ v + 1.0, jnp.ones((2, 1))),
        ),
    ],
    ids=["literal", "negative-zero", "operands-swapped", "primitive", "dtype", "shape"],
)
def test_a_different_computation_has_another_key(one, other):
    assert _key(one().jaxpr) == _key(one().jaxpr)
    assert _key(one().jaxpr) != _key(other().jaxpr)


def test_closed_jaxprs_key_their_constants_by_value():
    def f(v):
        return v * np.array([1.0, 2.0], np.float32)

    def g(v):
        return v * np.array([1.0, 3.0], np.float32)

    one, two = jax.make_jaxpr(f)(jnp.ones(2)), jax.make_jaxpr(f)(jnp.ones(2))
    assert _key(one) == _key(two)
    assert _key(one) != _key(jax.make_jaxpr(g)(jnp.ones(2)))
    # A closed jaxpr and its open jaxpr are different things (JAX 0.12 made them one type, whose
    # `.jaxpr` is the object itself).
    if one.jaxpr is not one:
        assert _key(one) != _key(one.jaxpr)


def test_sub_jaxprs_are_keyed_by_value():
    def make(branch_constant):
        def f(p, x):
            return jax.lax.cond(p, lambda y: y + branch_constant, lambda y: y * 2.0, x)

        return jax.make_jaxpr(f)(True, 1.0)

    assert _key(make(1.0)) == _key(make(1.0))
    assert _key(make(1.0)) != _key(make(3.0))


def test_a_nested_jit_is_keyed_by_value():
    # On JAX 0.5 the primitives hold cycles (numbered in the key), and a memo hit in the second
    # key used to shift their numbers (`test_keys_numbering.py`).
    @jax.jit
    def inner(x):
        return jnp.sin(x)

    nested = [jax.make_jaxpr(lambda x: inner(x) + 1.0)(1.0) for _ in range(2)]
    assert _key(nested[0]) == _key(nested[1])


def test_each_equations_context_is_keyed_by_its_settings():
    # Newer JAX interns an equation's context; JAX 0.5.3 makes one per equation (with no
    # `__eq__`), so it is keyed by its settings, and a changed setting is another program.
    def f(x):
        return x + 1.0

    one, two = jax.make_jaxpr(f)(1.0), jax.make_jaxpr(f)(1.0)
    assert _key(one) == _key(two)
    with jax.threefry_partitionable(not jax.threefry_partitionable.value):
        other = jax.make_jaxpr(f)(1.0)
    assert _key(one) != _key(other)


@pytest.mark.parametrize(
    "make", [lambda: 1, lambda: "jaxpr", lambda: None, lambda: jnp.ones(2), lambda: lambda x: x]
)
def test_anything_else_is_not_a_jaxpr(make):
    assert jaxpr_key(make(), es.stable_key) is None


@pytest.mark.counts_traces
def test_a_jaxpr_static_converted_again_is_a_hit():
    traces = 0

    def body(op, v):
        nonlocal traces
        traces += 1
        return op(v)

    run = es.filter_jit(body)
    v = jnp.array([1.0, 2.0])
    for _ in range(3):
        np.testing.assert_allclose(run(_matvec(_m()), v), _m() @ v + 1.0)
    assert traces == 1 and run.cache_info().misses == 1
    # Another computation (another constant) is another key, and a right answer.
    np.testing.assert_allclose(run(_matvec(_m(), 2.0), v), _m() @ v + 2.0)
    assert traces == 2
    # The closed-over array is a constant of the jaxpr, which Equinox passes as an argument
    # (where the jaxpr holds its constants itself, JAX 0.12, another constant is another key).
    converted = _matvec(2 * _m())
    np.testing.assert_allclose(run(converted, v), 2 * _m() @ v + 1.0)
    assert traces == (3 if _holds_its_constants(converted) else 2)


@pytest.mark.counts_traces
def test_a_jaxpr_static_under_plain_equinox_after_stabilize():
    # The `1.0` of `m @ v + 1.0` is a NumPy literal that can be written (JAX makes it afresh, but
    # it cannot be told apart from a user's 0-d array, which JAX holds by reference): `stabilize`
    # keeps each converted jaxpr, so plain `eqx.filter_jit` traces once per rebuild here, a
    # missed sharing, never a wrong answer (`test_key_jaxpr_substitution.py`). A jaxpr with no
    # such literal is shared (there, too).
    run, traces = counting_filter_jit(lambda op, v: op(v))

    v = jnp.array([1.0, 2.0])
    for c in (1.0, 1.0, 3.0):
        np.testing.assert_allclose(run(es.stabilize(_matvec(_m(), c)), v), _m() @ v + c)
    assert traces() == 3


def _copy_of(aval):
    """An abstract value equal to `aval` slot by slot but another object: JAX 0.12 interns only
    some avals and compares them by identity."""
    t = type(aval)
    copy = object.__new__(t)
    for c in t.__mro__:
        for name in c.__dict__.get("__slots__", ()):
            if name != "__weakref__" and hasattr(aval, name):
                object.__setattr__(copy, name, getattr(aval, name))
    return copy


def test_abstract_values_are_keyed_by_value():
    from eqxstable._keys._jaxpr import _aval

    jaxpr = jax.make_jaxpr(lambda v, w: v * w)(jnp.ones(2), jnp.ones(2, jnp.int32)).jaxpr
    floats, ints = (var.aval for var in jaxpr.invars)
    same = _copy_of(floats)
    assert same is not floats
    assert _aval(same, es.stable_key) == _aval(floats, es.stable_key)
    assert _aval(ints, es.stable_key) != _aval(floats, es.stable_key)
    weak = floats.update(weak_type=True)
    assert _aval(weak, es.stable_key) != _aval(floats, es.stable_key)
