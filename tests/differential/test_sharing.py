"""The other half of the contract: what must still share one compiled program after the
"never wrong" changes. Each test counts traces with a `nonlocal` counter in the jitted body and
checks the answers too."""

import functools as ft
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqxstable as es

from ..helpers import compile_log


# NumPy, not JAX, arrays: a JAX array made at import starts JAX's backend while the tests are
# collected, which the mutation run's fork server must not do (tests/README.md).
_G = np.array([3.0, -4.0], np.float32)
_P = np.array([1.0, 1.0], np.float32)


def _mul(x, s):
    return x * s


def _counting(jit):
    """`jit` of `apply(obj, *args) = obj(*args)`, and a function reading its trace count."""
    traces = 0

    def apply(obj, *args):
        nonlocal traces
        traces += 1
        return obj(*args)

    return jit(apply), lambda: traces


class Net(eqx.Module):
    fn: Callable

    def __call__(self, x):
        return self.fn(x)


class StableNet(es.StableModule):
    fn: Callable

    def __call__(self, x):
        return self.fn(x)


def _f(x):
    return x * 2.0


# Each factory makes a new object per call; all of one factory's objects are equivalent.
_FACTORIES = {
    "lambda": lambda: lambda z: z * 2.0,
    "closure": lambda: (lambda k: lambda z: z * k)(2.0),
    "module_with_lambda": lambda: Net(lambda z: jnp.tanh(z) / 2),
    "partial": lambda: ft.partial(_mul, s=2.0),
    "jtu_partial": lambda: jax.tree_util.Partial(_mul, s=2.0),
    "eqx_partial": lambda: eqx.Partial(_mul, s=2.0),
    "jax_jit": lambda: jax.jit(_f),
    "jax_vmap": lambda: jax.vmap(_f, in_axes=0),
    "jax_grad": lambda: jax.grad(lambda z: jnp.sum(z**2)),
    "jax_checkpoint": lambda: jax.checkpoint(_f),
    "filter_vmap": lambda: eqx.filter_vmap(_f),
    "library_partial": lambda: ft.partial(jax.nn.leaky_relu, negative_slope=0.2),
}


# `es.intern` of a whole module is not shared today, so it is no regression bar here.
_CASES = [
    (mode, name)
    for mode in ("jit_arg", "stable", "intern")
    for name in sorted(_FACTORIES)
    if (mode, name) != ("intern", "module_with_lambda")
]


@pytest.mark.parametrize("mode, name", _CASES)
@pytest.mark.counts_traces
def test_rebuilt_equivalents_share_one_program(mode, name):
    es.clear_caches()
    make = _FACTORIES[name]
    x = jnp.array([0.5, -1.0])
    jit = es.filter_jit if mode == "jit_arg" else eqx.filter_jit
    run, traces = _counting(jit)
    for _ in range(3):
        obj = make()
        if mode == "stable":
            obj = StableNet(obj)
        elif mode == "intern":
            obj = es.intern(obj)
        np.testing.assert_allclose(run(obj, x), make()(x), rtol=1e-6)
    assert traces() == (3 if mode != "jit_arg" and name in _OWN_DICT else 1)


# A `functools.partial` with keywords owns its `keywords` dict, which its owner can change in
# place, so `es.intern` (and a `StableModule`'s regular field) never replaces one by another
# (CONTRACT section 1; attack5 finding 11): plain `equinox.filter_jit` then compares rebuilt ones
# by identity, as for an `eqx.Module`. `es.filter_jit` shares them (by key, watched), and so does
# a `StableModule`'s static field (`tests/test_registry_owned_dicts.py`). A `jax.tree_util` or
# Equinox `Partial` keeps its keywords as pytree children, which a module's walk makes canonical.
_OWN_DICT = frozenset({"partial", "library_partial"})


def _first_update(opt, g, p) -> Any:
    return opt.update(g, opt.init(p), p)[0]


@pytest.mark.counts_traces
def test_optax_adam_rebuilt_shares_and_other_learning_rate_does_not():
    es.clear_caches()
    traces = 0

    @es.filter_jit
    def step(opt, g, p):
        nonlocal traces
        traces += 1
        return _first_update(opt, g, p)

    outs = [step(optax.adam(1e-3), _G, _P) for _ in range(3)]
    out = outs[-1]
    np.testing.assert_allclose(out, _first_update(optax.adam(1e-3), _G, _P), rtol=1e-6)
    assert traces == 1
    out = step(optax.adam(1e-4), _G, _P)
    np.testing.assert_allclose(out, _first_update(optax.adam(1e-4), _G, _P), rtol=1e-6)
    assert traces == 2


# In the two tests below the jitted function is module-level code reading globals, so a trace
# counter inside it would itself be a global it reads: JAX's compile log counts instead.


def test_optimiser_rebuilt_each_epoch_as_a_global_compiles_once():
    """The issue's bar: a global rebound to an equivalent value is a hit."""
    es.clear_caches()
    ns: dict = {"__name__": "__main__", "optax": optax, "es": es, "G": _G, "P": _P}
    with compile_log() as log:
        exec(
            "def loss_step(g, p):\n"
            "    return opt.update(g, opt.init(p), p)[0]\n"
            "outs = []\n"
            "for epoch in range(3):\n"
            "    opt = optax.adam(1e-3)\n"
            "    outs.append(es.filter_jit(loss_step)(G, P))\n",
            ns,
        )
    assert log.count("loss_step") == 1
    np.testing.assert_allclose(ns["outs"][-1], _first_update(optax.adam(1e-3), _G, _P), rtol=1e-6)


def test_global_rebound_to_an_equal_value_is_a_hit():
    es.clear_caches()
    ns: dict = {"__name__": "__main__", "jnp": jnp, "es": es}
    with compile_log() as log:
        exec(
            "lr = 0.1\n"
            "def f(x):\n"
            "    return x * lr\n"
            "run = es.filter_jit(f)\n"
            "a = run(jnp.ones(2))\n"
            "lr = float('0.1')\n"  # A new float object, equal and of the same type.
            "b = run(jnp.ones(2))\n"
            "c = es.filter_jit(f)(jnp.ones(2))\n",
            ns,
        )
    assert log.count("f") == 1
    assert ns["run"].cache_info().misses == 1
    np.testing.assert_allclose(ns["c"], 0.1 * np.ones(2), rtol=1e-6)


@pytest.mark.parametrize(
    "first, second",
    [
        (lambda: jax.jit(_f), lambda: jax.jit(_f, donate_argnums=0)),
        (lambda: jax.vmap(_f, in_axes=0), lambda: jax.vmap(_f, in_axes=1)),
        (lambda: jax.grad(_f, argnums=0), lambda: jax.grad(_f, argnums=1)),
        (lambda: jax.checkpoint(_f), lambda: jax.checkpoint(_f, prevent_cse=False)),
        (lambda: eqx.filter_vmap(_f, in_axes=0), lambda: eqx.filter_vmap(_f, in_axes=1)),
        (lambda: optax.adam(1e-3), lambda: optax.adam(1e-4)),
        (lambda: ft.partial(_mul, s=1), lambda: ft.partial(_mul, s=1.0)),
    ],
    ids=[
        "jit_donate",
        "vmap_in_axes",
        "grad_argnums",
        "checkpoint_prevent_cse",
        "filter_vmap_in_axes",
        "adam_lr",
        "partial_int_float",
    ],
)
def test_a_different_option_is_a_different_key(first, second):
    a, b = first(), second()
    assert es.stable_key(a) != es.stable_key(b)
    assert es.stable_key(first()) == es.stable_key(a)
    assert es.intern(a) is not es.intern(b)
