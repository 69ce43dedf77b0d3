"""Equation parameters in the fingerprint (`_fingerprint.param_key`): an object that the strict
key of an output would take by identity (a function, a list, Equinox's `Flatten`) is keyed in a
jaxpr's parameters by what it is, so that lineax, optimistix and diffrax programs, whose
`filter_primitive`s carry fresh lambdas and a fresh `Flatten` on every trace, are reused and pass
verify mode; and a different function still keeps two programs apart."""

import jax
import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._jit._fingerprint import _Same, AVAILABLE, key_of, param_key


pytestmark = pytest.mark.skipif(not AVAILABLE, reason="no reuse by fingerprint on this JAX")
lx = pytest.importorskip("lineax")


def _solve(config):
    def solve(b):
        # A fresh lambda (and a fresh `Flatten`) inside `linear_solve_p`'s parameters per trace.
        op = lx.FunctionLinearOperator(
            lambda v: config["scale"] * v, jax.ShapeDtypeStruct((2,), jnp.float32)
        )
        return lx.linear_solve(op, b).value

    return solve


def test_verify_mode_accepts_a_filter_primitive_with_fresh_lambdas():
    f = es.filter_jit(_solve({"scale": 2.0}), verify=True)
    for _ in range(3):
        assert jnp.allclose(f(jnp.ones(2)), 0.5)


@pytest.mark.counts_traces
def test_rebuilt_solves_share_a_program_and_a_changed_one_does_not():
    es.clear_caches()
    jax.clear_caches()
    b = jnp.asarray([1.0, 3.0])
    # Closures over fresh dicts (identity-keyed): a miss each, and the trace decides reuse.
    wrappers = [es.filter_jit(_solve({"scale": 2.0})) for _ in range(3)]
    outs = [w(b) for w in wrappers]
    for out in outs:
        assert jnp.allclose(out, b / 2)
    changed = es.filter_jit(_solve({"scale": 4.0}))
    assert jnp.allclose(changed(b), b / 4)
    infos = [w.cache_info() for w in (*wrappers, changed)]
    assert [(i.traces, i.compiles) for i in infos] == [(1, 1), (1, 0), (1, 0), (1, 1)]


def test_param_key_keys_functions_and_containers_by_value_outputs_by_identity():
    def make(k):
        return lambda v: k * v

    assert param_key(make(2.0)) == param_key(make(2.0))
    assert param_key(make(2.0)) != param_key(make(3.0))
    assert param_key(make(1)) != param_key(make(1.0))
    assert param_key([1, (2.0,)]) == param_key([1, (2.0,)])
    assert param_key([1]) != param_key([1.0]) and param_key([0.0]) != param_key([-0.0])
    assert param_key({"a": [1]}) == param_key({"a": [1]})
    # An output's leaves stay strict: a guest never receives another object.
    assert type(key_of([1])) is _Same and key_of([1]) != key_of([1])


def test_a_flatten_is_keyed_by_what_its_rule_recorded():
    flatten_type = pytest.importorskip("equinox.internal._primitive").Flatten

    def filled(out):
        flatten = flatten_type()
        flatten(out)
        return flatten

    a, b = filled((jnp.ones(2), 1)), filled((jnp.zeros(2), 1))
    assert param_key(a) == param_key(b)  # Same structure and static part.
    assert param_key(a) != param_key(filled((jnp.ones(2), 1.0)))
    assert param_key(a) != param_key(filled([jnp.ones(2), 1]))
    # Not yet called: nothing to compare, so only itself.
    empty = flatten_type()
    assert param_key(empty) == param_key(empty) and param_key(empty) != param_key(flatten_type())
