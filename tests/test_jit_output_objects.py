"""An output leaf that is one of the call's static inputs is the CURRENT call's object (attack 6,
finding 07): a call that hits a program traced with an equivalent object gets its own object
back, as `equinox.filter_jit` (which traces it again) returns it, never the traced call's. Trace
counts show that the call still hit."""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._jit._fingerprint import AVAILABLE

from .helpers import returns_its_partial, scale_by


@pytest.mark.counts_traces
def test_a_returned_partial_is_the_callers_own():
    step, traces = returns_its_partial()
    w = es.filter_jit(step)
    x = jnp.ones(2)
    p1, p2 = ft.partial(scale_by, s=2.0), ft.partial(scale_by, s=2.0)
    y1, out1 = w(x, p1)
    y2, out2 = w(x, p2)
    assert out1 is p1 and out2 is p2
    assert y1.tolist() == y2.tolist() == [2.0, 2.0]
    assert traces() == 1 and w.cache_info()[:2] == (1, 1)
    # The caller changes what it got back: the object another part of the program holds is not.
    out2.keywords["s"] = 5.0
    assert p1.keywords["s"] == 2.0


@pytest.mark.counts_traces
def test_a_training_step_returns_the_model_it_was_given():
    n = 0

    def step(model, x):
        nonlocal n
        n += 1
        grads = eqx.filter_grad(lambda m: jnp.sum(jax.vmap(m)(x)))(model)
        updates = jax.tree.map(lambda g: -0.1 * g, grads)
        return eqx.apply_updates(model, updates)

    def make():
        return eqx.nn.MLP(2, 2, 4, 1, activation=lambda v: jnp.tanh(v), key=jax.random.key(0))

    w = es.filter_jit(step)
    x = jnp.ones((3, 2))
    m1, m2 = make(), make()
    assert m1.activation is not m2.activation
    new1 = w(m1, x)
    new2 = w(m2, x)
    assert n == 1 and w.cache_info()[:2] == (1, 1)
    assert new1.activation is m1.activation and new2.activation is m2.activation
    want = eqx.filter_jit(step)(m2, x)
    assert jnp.array_equal(new2.layers[0].weight, want.layers[0].weight)
    # The next step of each training loop keeps its own model's function.
    assert w(new2, x).activation is m2.activation
    assert n == 2  # eqx.filter_jit's own trace of `step` counted too.


@pytest.mark.counts_traces
def test_nested_outputs_repeated_objects_and_keyword_arguments():
    n = 0

    def f(x, a, b, *, c):
        nonlocal n
        n += 1
        # Made inside the trace: served only to the objects that traced it (attack 12b-02).
        made = ft.partial(scale_by, s=3.0)
        return {"first": [a, (x * 2, b)], "again": a, "c": c, "made": made}

    w = es.filter_jit(f)
    x = jnp.ones(2)

    def objects():
        return ft.partial(scale_by, s=1.0), ft.partial(scale_by, s=2.0), ft.partial(scale_by, s=4.0)

    a1, b1, c1 = objects()
    out1 = w(x, a1, b1, c=c1)
    a2, b2, c2 = objects()
    out2 = w(x, a2, b2, c=c2)
    # Equivalent objects, but the output holds one the trace made: traced again, as Equinox
    # (which keys a partial by identity) does, for a fresh one.
    assert n == 2 and w.cache_info()[:2] == (0, 2)
    for out, (a, b, c) in ((out1, (a1, b1, c1)), (out2, (a2, b2, c2))):
        assert out["first"][0] is a and out["again"] is a
        assert out["first"][1][1] is b and out["c"] is c
        assert out["first"][1][0].tolist() == [2.0, 2.0]
    assert out2["made"] is not out1["made"]
    assert w(x, a1, b1, c=c1)["made"] is out1["made"] and n == 2


class _Holder(eqx.Module):
    fn: object

    def __call__(self, x):
        return x + 1, self.fn


@pytest.mark.counts_traces
def test_the_functions_own_static_leaf_is_the_wrappers_own():
    h1, h2 = _Holder(ft.partial(scale_by, s=2.0)), _Holder(ft.partial(scale_by, s=2.0))
    w1, w2 = es.filter_jit(h1), es.filter_jit(h2)
    x = jnp.ones(2)
    assert w1(x)[1] is h1.fn
    assert w2(x)[1] is h2.fn
    assert w1(x)[1] is h1.fn
    # The two wrappers share one program: the second's call traced nothing.
    assert w2.cache_info().misses == 0


def test_a_lowered_and_compiled_call_returns_its_own_objects():
    w = es.filter_jit(lambda x, p: (p(x), p))
    x = jnp.ones(2)
    p1, p2 = ft.partial(scale_by, s=2.0), ft.partial(scale_by, s=2.0)
    compiled = w.lower(x, p1).compile()
    assert compiled(x, p1)[1] is p1
    y, out = compiled(x, p2)
    assert out is p2 and y.tolist() == [2.0, 2.0]


@pytest.mark.skipif(not AVAILABLE, reason="no reuse by fingerprint on this JAX")
@pytest.mark.counts_traces
def test_a_guest_of_another_functions_program_returns_its_own_objects(compiles):
    # Two functions keyed apart (closures over fresh dicts) whose traces are equal: the second
    # runs the first's program (no compile) and still returns the objects it was called with.
    def make(d):
        def g(x, p):
            return p(x) * d["a"], p

        return g

    w1, w2 = es.filter_jit(make({"a": 3.0})), es.filter_jit(make({"a": 3.0}))
    x = jnp.ones(2)
    p1, p2, p3 = (ft.partial(scale_by, s=2.0) for _ in range(3))
    y1, out1 = w1(x, p1)
    y2, out2 = w2(x, p2)
    assert out1 is p1 and out2 is p2
    assert y1.tolist() == y2.tolist() == [6.0, 6.0]
    assert (w1.cache_info().compiles, w2.cache_info().compiles) == (1, 0)
    assert compiles.count("g") == 1
    # The guest's hit, and the owner's, each with yet another equivalent object.
    assert w2(x, p3)[1] is p3
    assert w1(x, p3)[1] is p3
    assert w2.cache_info()[:2] == (1, 1)


def test_under_transformations_each_call_gets_its_own_objects():
    w = es.filter_jit(lambda x, p: (p(x), p))
    x = jnp.ones(2)
    p1, p2, p3 = (ft.partial(scale_by, s=2.0) for _ in range(3))
    assert w(x, p1)[1] is p1
    ys, out = eqx.filter_vmap(w, in_axes=(0, None))(jnp.ones((3, 2)), p2)
    assert out is p2 and ys.tolist() == [[2.0, 2.0]] * 3

    def loss(x, p):
        y, q = w(x, p)
        assert q is p
        return jnp.sum(y)

    assert jax.grad(loss)(x, p3).tolist() == [2.0, 2.0]
    with jax.disable_jit():
        assert w(x, p3)[1] is p3
