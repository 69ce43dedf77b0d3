"""A callable that `intern` keeps in a regular field of a stabilized module, where `stable_key`
proves two rebuilt ones equivalent, still hits plain `equinox.filter_jit`: a partial with
keywords becomes a `KeyedPartial` (the same partial, compared by its key while unchanged), and
`jax.vmap(jnp.sin)`, whose `__dict__` holds only what `functools.wraps` copied from `jnp.sin`,
is substituted."""

import copy
import functools as ft
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import eqxstable as es


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


def _counted():
    traces = [0]

    @eqx.filter_jit
    def run(m, x):
        traces[0] += 1
        return m(x)

    return run, traces


def _mlp(act: Any) -> eqx.nn.MLP:
    return es.stabilize(eqx.nn.MLP(2, 2, 4, 1, activation=act, key=jax.random.key(0)))


class Act(es.StableModule):
    act: Any

    def __call__(self, x):
        return self.act(x)


def _leaky(slope: float) -> ft.partial:
    return ft.partial(jax.nn.leaky_relu, negative_slope=slope)


@pytest.mark.counts_traces
def test_partial_with_keywords_in_a_stabilized_mlp():
    run, traces = _counted()
    x = jnp.array([-1.0, 2.0])
    out1 = run(_mlp(_leaky(0.1)), x)
    out2 = run(_mlp(_leaky(0.1)), x)
    assert traces[0] == 1
    assert jnp.array_equal(out1, out2)
    eager = eqx.nn.MLP(2, 2, 4, 1, activation=_leaky(0.1), key=jax.random.key(0))(x)
    assert jnp.allclose(out1, eager)
    run(_mlp(_leaky(0.2)), x)
    assert traces[0] == 2


@pytest.mark.counts_traces
def test_partial_with_keywords_in_a_stable_module():
    run, traces = _counted()
    x = jnp.array([-1.0, 2.0])
    assert jnp.allclose(run(Act(_leaky(0.1)), x), jnp.array([-0.1, 2.0]))
    assert jnp.allclose(run(Act(_leaky(0.1)), x), jnp.array([-0.1, 2.0]))
    assert traces[0] == 1
    assert jnp.allclose(run(Act(_leaky(0.3)), x), jnp.array([-0.3, 2.0]))
    assert traces[0] == 2


@pytest.mark.counts_traces
def test_partial_changed_after_its_trace_is_never_reused():
    run, traces = _counted()
    x = jnp.array([-1.0])
    p = _leaky(0.1)
    m1 = Act(p)
    assert jnp.allclose(run(m1, x), -0.1)
    # Changed in place after the trace: a rebuilt module equal to the changed one, or to the
    # old one, must not reuse the program traced for 0.1 (nor take it for 0.2).
    p.keywords["negative_slope"] = 0.2
    assert jnp.allclose(run(Act(_leaky(0.2)), x), -0.2)
    assert jnp.allclose(run(Act(_leaky(0.1)), x), -0.1)
    assert traces[0] == 3


def test_keyed_partial_reads_as_the_partial():
    p = _leaky(0.1)
    p.tag = "mine"  # pyright: ignore[reportAttributeAccessIssue]
    m = Act(p)
    act = m.act
    assert isinstance(act, ft.partial)
    assert act.func is p.func and act.args == p.args
    # The very same dicts: a change through one is read through the other.
    assert act.keywords is p.keywords
    assert act.tag == "mine"  # pyright: ignore[reportAttributeAccessIssue]
    assert repr(act) == repr(p)
    assert type(copy.copy(act)) is ft.partial and type(copy.deepcopy(act)) is ft.partial
    assert copy.deepcopy(act).keywords == {"negative_slope": 0.1}
    assert jax.tree.structure(m) == jax.tree.structure(Act(_leaky(0.1)))
    # Idempotent.
    assert es.stabilize(m).act is act


@pytest.mark.counts_traces
def test_vmap_in_a_regular_field():
    run, traces = _counted()
    x = jnp.array([0.5, 1.0])
    out = run(Act(jax.vmap(jnp.sin)), x)
    run(Act(jax.vmap(jnp.sin)), x)
    assert traces[0] == 1
    assert jnp.allclose(out, jnp.sin(x))
    run(Act(jax.vmap(jnp.cos)), x)
    assert traces[0] == 2


def test_function_attributes_of_its_own_still_block_substitution():
    def make():
        def f(x):
            return x * f.scale  # pyright: ignore[reportFunctionMemberAccess]

        f.scale = 2.0  # pyright: ignore[reportFunctionMemberAccess]
        return f

    a, b = make(), make()
    assert es.stable_key(a) == es.stable_key(b)
    assert es.intern(a) is a and es.intern(b) is b

    # A wrapper of a user function, holding what `wraps` copied: still the user's data.
    def g(x):
        return x

    g.scale = 3.0  # pyright: ignore[reportFunctionMemberAccess]
    w1, w2 = ft.wraps(g)(lambda x: x), ft.wraps(g)(lambda x: x)
    es.intern(w1)
    assert es.intern(w2) is w2


@pytest.mark.counts_traces
def test_stable_filter_jit_still_shares_a_keyed_partial():
    traces = 0

    @es.filter_jit
    def run(m, x):
        nonlocal traces
        traces += 1
        return m(x)

    x = jnp.array([-1.0])
    assert es.stable_key(Act(_leaky(0.1))) == es.stable_key(Act(_leaky(0.1)))
    assert es.stable_key(Act(_leaky(0.1))) != es.stable_key(Act(_leaky(0.2)))
    assert jnp.allclose(run(Act(_leaky(0.1)), x), -0.1)
    assert jnp.allclose(run(Act(_leaky(0.1)), x), -0.1)
    assert traces == 1
    assert jnp.allclose(run(Act(_leaky(0.2)), x), -0.2)
    assert traces == 2
