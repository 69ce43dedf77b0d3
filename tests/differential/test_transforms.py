"""Differential situations: JAX and Equinox transforms and their options, optax optimisers, and
modules holding lambdas that a sweep changes (diffrax-, optimistix- and MLP-like code)."""

import functools as ft
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from .harness import check, MODES, Situations


SITUATIONS = Situations()

# NumPy, not JAX, arrays: a JAX array made at import starts JAX's backend while the tests are
# collected, which the mutation run's fork server must not do (tests/README.md).
_M = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
_W = np.array([1.0, 10.0], np.float32)


def _weighted_sum(v):
    return jnp.sum(v * _W)


def _make(value):
    c = value

    def f(x):
        return jnp.sum(x * x) * c

    def set_c(new):
        nonlocal c
        c = new

    return f, set_c


@SITUATIONS.add
def vmap_in_axes(h):
    for axes in (0, 1):
        h.call(jax.vmap(_weighted_sum, in_axes=axes), _M)


@SITUATIONS.add
def vmap_out_axes(h):
    for axes in (0, 1):
        h.call(jax.vmap(lambda v: v * _W, out_axes=axes), _M)


@SITUATIONS.add
def grad_argnums(h):
    for argnums in (0, 1):
        h.call(jax.grad(lambda a, b: jnp.sum(a * b * b), argnums=argnums), _W, _W + 1.0)


@SITUATIONS.add
def value_and_grad_argnums(h):
    for argnums in (0, 1):
        h.call(jax.value_and_grad(lambda a, b: jnp.sum(a * b * b), argnums=argnums), _W, _W)


@SITUATIONS.add
def grad_of_closures_rebuilt(h):
    for k in (2.0, 3.0):
        h.call(jax.grad(_make(k)[0]), _W)


@SITUATIONS.add
def grad_same_object_cell_rebound(h):
    f, set_c = _make(2.0)
    g = jax.grad(f)
    h.call(g, _W)
    set_c(3.0)
    h.call(g, _W)


@SITUATIONS.add
def vmap_same_object_cell_rebound(h):
    f, set_c = _make(2.0)
    g = jax.vmap(f)
    h.call(g, _M)
    set_c(5.0)
    h.call(g, _M)


@SITUATIONS.add
def grad_of_global_reader_rebuilt(h):
    h.module("""
    for k in (2.0, 3.0):
        h.call(jax.grad(lambda x: jnp.sum(k * x ** 2)), jnp.ones(2))
    """)


@SITUATIONS.add
def jit_of_global_reader_rebuilt(h):
    """`jax.jit(lambda x: x * c)` rebuilt per value of a module-level `c`."""
    h.module("""
    for c in (2.0, 3.0):
        h.call(jax.jit(lambda x: x * c), jnp.ones(2))
    """)


@SITUATIONS.add
def checkpoint_of_global_reader_rebuilt(h):
    h.module("""
    for c in (2.0, 3.0):
        h.call(jax.checkpoint(lambda x: jnp.sin(x) * c), jnp.ones(2))
    """)


@SITUATIONS.add
def filter_vmap_in_axes(h):
    for axes in (0, 1):
        h.call(eqx.filter_vmap(_weighted_sum, in_axes=axes), _M)


@SITUATIONS.add
def filter_vmap_out_axes(h):
    for axes in (0, 1):
        h.call(eqx.filter_vmap(lambda v: v * _W, out_axes=axes), _M)


@SITUATIONS.add
def filter_grad_of_global_reader_rebuilt(h):
    h.module("""
    for k in (2.0, 3.0):
        h.call(eqx.filter_grad(lambda x: jnp.sum(k * x ** 2)), jnp.ones(2))
    """)


@SITUATIONS.add
def partial_of_a_library_activation(h):
    x = jnp.array([-1.0, 2.0])
    for slope in (0.1, 0.3):
        h.call(ft.partial(jax.nn.leaky_relu, negative_slope=slope), x)


def _first_update(opt, g, params):
    updates, _ = opt.update(g, opt.init(params), params)
    return updates


_G = np.array([3.0, -4.0], np.float32)
_P = np.array([1.0, 1.0], np.float32)


@SITUATIONS.add
def optax_adam_learning_rate(h):
    """`optax.adam(1e-3)` is never equivalent to `optax.adam(1e-4)`."""
    for lr in (1e-3, 1e-4, 1e-3):
        h.call(optax.adam(lr), _G, _P, apply=_first_update)


@SITUATIONS.add
def optax_chain_clip(h):
    for clip in (1.0, 0.5):
        opt = optax.chain(optax.clip_by_global_norm(clip), optax.sgd(1.0))
        h.call(opt, _G, _P, apply=_first_update)


@SITUATIONS.add
def optax_adamw_weight_decay(h):
    for wd in (0.0, 0.5):
        h.call(optax.adamw(1e-2, weight_decay=wd), _G, _P, apply=_first_update)


@SITUATIONS.add
def optax_schedule_reads_a_global(h):
    """A learning-rate schedule written by the user, reading a module-level `base`."""
    h.module(
        """
    for base in (0.1, 0.5):
        h.call(optax.sgd(lambda step: base), G, P, apply=apply)
    """,
        optax=optax,
        G=_G,
        P=_P,
        apply=_first_update,
    )


@SITUATIONS.add
def optax_rebuilt_each_epoch_from_a_config_object(h):
    h.module(
        """
    class Config:
        lr = 0.1
    for lr in (0.1, 0.5):
        Config.lr = lr
        h.call(optax.sgd(lambda step: Config.lr), G, P, apply=apply)
    """,
        optax=optax,
        G=_G,
        P=_P,
        apply=_first_update,
    )


class Net(eqx.Module):
    fn: Callable

    def __call__(self, x):
        return self.fn(x)


@SITUATIONS.add
def module_lambda_reads_a_config_object(h):
    """Issue item 2: a module whose lambda reads a config object that a sweep changes."""

    class Config:
        def __init__(self):
            self.scale = 1.0

    cfg = Config()
    for scale in (1.0, 2.0, 3.0):
        cfg.scale = scale
        h.call(Net(lambda z: z * cfg.scale), jnp.ones(2))


@SITUATIONS.add
def module_lambda_reads_a_list(h):
    scales = [1.0]
    for scale in (1.0, 2.0):
        scales[0] = scale
        h.call(Net(lambda z: z * scales[0]), jnp.ones(2))


@SITUATIONS.add
def mlp_activation_reads_a_global(h):
    h.module(
        """
    key = jr.key(0)
    for s in (1.0, 3.0):
        mlp = eqx.nn.MLP(2, 2, 4, 1, activation=lambda x: jnp.tanh(s * x), key=key)
        h.call(mlp, jnp.array([0.5, -1.0]))
    """,
        jr=jr,
    )


@SITUATIONS.add
def diffrax_like_term_sweep(h):
    """A script-level sweep: `ODETerm(lambda t, y, args: -k * y)`, `k` the loop variable."""
    h.module("""
    class ODETerm(eqx.Module):
        vector_field: object

    def solve(term, y0):
        def step(y, _):
            return y + 0.1 * term.vector_field(0.0, y, None), None
        return jax.lax.scan(step, y0, None, length=5)[0]

    for k in (1.0, 2.0):
        h.call(ODETerm(lambda t, y, args: -k * y), jnp.ones(2), apply=solve)
    """)


@SITUATIONS.add
def optimistix_like_root_find(h):
    """Newton's method on `fn(y) = y**2 - k`, `fn` a module-level lambda over the loop's `k`."""
    h.module("""
    class Root(eqx.Module):
        fn: object

    def newton(problem, y0):
        def step(y, _):
            return y - problem.fn(y, None) / jax.grad(lambda z: problem.fn(z, None))(y), None
        return jax.lax.scan(step, y0, None, length=8)[0]

    for k in (2.0, 9.0):
        h.call(Root(lambda y, args: y ** 2 - k), jnp.array(1.0), apply=newton)
    """)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_transform(situation, mode):
    check(situation, mode)
