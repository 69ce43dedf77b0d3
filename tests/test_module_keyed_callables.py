"""A library wrapper in a regular field of a stabilized module, where `stable_key` proves two
rebuilt ones equivalent, hits plain `equinox.filter_jit`: `jax.vmap(jnp.sin)`, whose `__dict__`
holds only what `functools.wraps` copied from `jnp.sin`, is substituted."""

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
