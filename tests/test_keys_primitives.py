"""A JAX primitive's rules live in JAX's tables, which the program extends at run time (attack
round 10a, finding 08): after a user's primitive gets a new lowering
(`mlir.register_lowering`) or a new JVP (`ad.primitive_jvps[p] = ...`), a function binding it
must not be served the program traced and compiled before (`K-primitive`)."""

import importlib

import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core
from jax.interpreters import ad, mlir

import eqxstable as es
from eqxstable._keys import _primitives


def _primitive(name: str) -> core.Primitive:
    p = core.Primitive(name)
    p.def_impl(lambda x: x * 2.0)
    p.def_abstract_eval(lambda x: x)
    return p


def _lowering(k: float):
    return mlir.lower_fun(lambda x: x * k, multiple_results=False)


def _jvp(p: core.Primitive, k: float):
    def rule(primals, tangents):
        (x,), (t,) = primals, tangents
        return p.bind(x), t * k

    return rule


def test_a_primitive_s_rules_are_in_its_key():
    p = _primitive("rows_p")
    mlir.register_lowering(p, _lowering(2.0))
    before = es.stable_key(p)
    assert es.stable_key(p) == before
    mlir.register_lowering(p, _lowering(3.0))
    after_lowering = es.stable_key(p)
    assert after_lowering != before
    ad.primitive_jvps[p] = _jvp(p, 5.0)
    assert es.stable_key(p) != after_lowering
    # A reader (a global it binds) too, through the memo's watch of the same reader.
    reader = eval("lambda x: rows_p.bind(x)", {"rows_p": p})
    first = es.stable_key(reader)
    mlir.register_lowering(p, _lowering(4.0), platform="cpu")
    assert es.stable_key(reader) != first


@pytest.mark.counts_traces
def test_a_lowering_registered_again_is_a_new_program():
    p = _primitive("lowered_p")
    mlir.register_lowering(p, _lowering(2.0))
    traces = 0

    @es.filter_jit
    def run(fn, x):
        nonlocal traces
        traces += 1
        return fn(x)

    def make():
        return lambda x: p.bind(x)

    x = jnp.ones(2)
    np.testing.assert_array_equal(run(make(), x), [2.0, 2.0])
    # Unchanged rules: a fresh reader is the same key (no trace).
    np.testing.assert_array_equal(run(make(), x), [2.0, 2.0])
    assert traces == 1
    mlir.register_lowering(p, _lowering(3.0))
    np.testing.assert_array_equal(run(make(), x), [3.0, 3.0])
    assert traces == 2
    # The same reader again: its watch sees the table changed in place.
    same = make()
    run(same, x)
    mlir.register_lowering(p, _lowering(7.0))
    np.testing.assert_array_equal(run(same, x), [7.0, 7.0])
    assert run.misses[-1].kind == "mutated"


@pytest.mark.counts_traces
def test_a_jvp_registered_again_is_a_new_program():
    p = _primitive("differentiated_p")
    mlir.register_lowering(p, _lowering(2.0))
    ad.primitive_jvps[p] = _jvp(p, 2.0)

    @es.filter_jit
    def grad(fn, x):
        return __import__("jax").grad(lambda y: fn(y).sum())(x)

    def make():
        return lambda x: p.bind(x)

    x = jnp.ones(2)
    np.testing.assert_array_equal(grad(make(), x), [2.0, 2.0])
    ad.primitive_jvps[p] = _jvp(p, 5.0)
    np.testing.assert_array_equal(grad(make(), x), [5.0, 5.0])


@pytest.mark.counts_traces
def test_where_jax_moved_its_tables_a_reader_is_never_shared(monkeypatch):
    p = _primitive("moved_p")
    mlir.register_lowering(p, _lowering(2.0))
    monkeypatch.setattr(_primitives, "_found", None)
    traces = 0

    @es.filter_jit
    def run(fn, x):
        nonlocal traces
        traces += 1
        return fn(x)

    def make():
        return lambda x: p.bind(x)

    x = jnp.ones(2)
    a = make()
    np.testing.assert_array_equal(run(a, x), [2.0, 2.0])
    np.testing.assert_array_equal(run(make(), x), [2.0, 2.0])
    assert traces == 2
    # The very same reader keeps its key (a hit).
    run(a, x)
    assert traces == 2
    mlir.register_lowering(p, _lowering(3.0))
    np.testing.assert_array_equal(run(make(), x), [3.0, 3.0])


def _holds_primitives(table: object) -> bool:
    return isinstance(table, dict) and any(isinstance(k, core.Primitive) for k in list(table))


def test_jax_s_rule_tables_have_not_moved():
    """Every required table is where `_primitives` reads it, and JAX has no table of rules by
    primitive in these modules that `_primitives` does not read (a new one: add it)."""
    assert _primitives.rule_tables() is not None
    read = {(module, name) for module, name, _ in _primitives._TABLES}
    modules = {module for module, _ in read}
    unread = []
    for module in modules:
        for name, value in vars(importlib.import_module(module)).items():
            nested = isinstance(value, dict) and any(map(_holds_primitives, list(value.values())))
            if (_holds_primitives(value) or nested) and (module, name) not in read:
                unread.append((module, name))
    # Tables of parameter updaters for call primitives (JAX < 0.6) hold no rule of a user's
    # primitive: a user's `Primitive` is never a call primitive.
    unread = [(m, n) for m, n in unread if not n.endswith("param_updaters")]
    assert unread == []
