"""`es.field(dynamic=True)` in the standard training loop: traced, never trained.

The loop of every Equinox tutorial: `optim.init(eqx.filter(model, eqx.is_inexact_array))`,
`eqx.filter_value_and_grad`, `optim.update`, `eqx.apply_updates`, all under `eqx.filter_jit`.
A hyperparameter stored with `es.field(dynamic=True)` must come out of it exactly as it went in,
with the same losses as the `eqx.Module` whose hyperparameter is a plain Python float.
"""

import copy
import pickle

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import eqxstable as es

from .helpers import counting_filter_jit, enable_x64


class PlainRegressor(eqx.Module):
    linear: eqx.nn.Linear
    weight_decay: float

    def __init__(self, weight_decay, key):
        self.linear = eqx.nn.Linear(3, 1, key=key)
        self.weight_decay = weight_decay

    def __call__(self, x):
        return self.linear(x)


class StableRegressor(es.StableModule):
    linear: eqx.nn.Linear
    weight_decay: float = es.field(dynamic=True)

    def __init__(self, weight_decay, key):
        self.linear = eqx.nn.Linear(3, 1, key=key)
        self.weight_decay = weight_decay

    def __call__(self, x):
        return self.linear(x)


def _loss(model, xs, ys):
    pred = jax.vmap(model)(xs)[:, 0]
    penalty = model.weight_decay * jnp.sum(model.linear.weight**2)
    return jnp.mean((pred - ys) ** 2) + penalty


def _train(model, optim, steps=200):
    """The standard Equinox loop, as written in the tutorials."""
    xs = jr.normal(jr.key(1), (32, 3))
    ys = xs @ jnp.array([1.0, -2.0, 0.5]) + 0.3
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, opt_state):
        loss, grads = eqx.filter_value_and_grad(_loss)(model, xs, ys)
        params = eqx.filter(model, eqx.is_inexact_array)
        updates, opt_state = optim.update(grads, opt_state, params)
        return eqx.apply_updates(model, updates), opt_state, loss

    losses = []
    for _ in range(steps):
        model, opt_state, loss = step(model, opt_state)
        losses.append(float(loss))
    return model, losses


@pytest.mark.parametrize(
    "optim", [optax.adam(1e-2), optax.adamw(1e-2, weight_decay=0.5), optax.sgd(1e-2)]
)
def test_the_standard_loop_leaves_a_dynamic_field_untouched(optim):
    key = jr.key(0)
    plain, plain_losses = _train(PlainRegressor(0.1, key), optim)
    stable, stable_losses = _train(StableRegressor(0.1, key), optim)
    # The hyperparameter is exactly what it was; the weights trained exactly as with Equinox.
    assert plain.weight_decay == 0.1
    # Read outside a trace, it is the Python float assigned, exactly.
    assert type(stable.weight_decay) is float and stable.weight_decay == 0.1
    np.testing.assert_allclose(stable_losses, plain_losses, rtol=1e-6)
    np.testing.assert_allclose(stable.linear.weight, plain.linear.weight, rtol=1e-6)
    assert stable_losses[-1] < stable_losses[0] and stable_losses[-1] > 0


def test_filters_do_not_see_a_dynamic_field_as_trainable():
    model = StableRegressor(0.1, jr.key(0))
    trainable = eqx.filter(model, eqx.is_inexact_array)
    assert len(jax.tree.leaves(trainable)) == 2  # The weight and the bias, nothing else.
    grads = eqx.filter_grad(_loss)(model, jnp.ones((2, 3)), jnp.ones(2))
    assert len(jax.tree.leaves(grads)) == 2
    # Still traced: a new value is a new array, not a new program.
    run, traces = counting_filter_jit(lambda m, x: m.weight_decay * x)
    for decay in (0.1, 0.2, 0.3):
        out = run(StableRegressor(decay, jr.key(0)), jnp.ones(2, dtype=jnp.bfloat16))
        assert out.dtype == jnp.bfloat16
        np.testing.assert_allclose(out.astype(jnp.float32), decay, rtol=1e-2)
    assert traces() == 1


def test_sweep_of_the_hyperparameter_trains_once_per_value_but_compiles_once():
    key = jr.key(0)
    run, traces = counting_filter_jit(
        lambda model, x: eqx.filter_value_and_grad(lambda m: _loss(m, x, x[:, 0]))(model)
    )
    xs = jnp.ones((4, 3))
    values = []
    for decay in (0.0, 0.5, 1.0):
        loss, grads = run(StableRegressor(decay, key), xs)
        values.append(float(loss))
        assert jax.tree.leaves(grads)[0].shape == (1, 3)
    assert traces() == 1
    assert values[0] < values[1] < values[2]  # The penalty grows with the traced decay.


class Scale(es.StableModule):
    factor: float = es.field(dynamic=True)

    def __call__(self, x):
        return self.factor * x


def test_an_int_and_a_float_never_share_a_program():
    run, traces = counting_filter_jit(lambda model, x: model(x))
    x = jnp.array([1, 2**30], dtype=jnp.int32)
    first = run(Scale(2), x)
    assert first.dtype == jnp.int32
    out = run(Scale(2.0), x)
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, [2.0, 2.0**31])
    assert run(Scale(3), x).dtype == jnp.int32  # Another int: the int program again.
    assert traces() == 2


@pytest.mark.parametrize("value", [2**31, 2**40, -(2**63), 10**30])
def test_large_ints_stay_static(value):
    # A traced int is an int32 (without x64); a larger one stays the Python int, static.
    m = Scale(value)
    assert m.factor == value and type(m.factor) is int
    run, traces = counting_filter_jit(lambda model, x: model.factor + x)
    assert run(m, 1) == value + 1
    assert run(Scale(value + 1), 1) == value + 2
    assert traces() == 2  # One program per value, as a static value.


def test_built_without_x64_is_traced_with_x64_precision():
    m = Scale(0.1)
    run, _ = counting_filter_jit(lambda model, x: model.factor + x)
    assert run(m, jnp.zeros(())).dtype == jnp.float32
    with enable_x64(True):
        assert m.factor == 0.1
        out = run(m, jnp.zeros((), dtype=jnp.float64))
        assert out.dtype == jnp.float64 and float(out) == 0.1
        traced = eqx.filter_jit(lambda model: model.factor)(Scale(0.1))
        assert traced.dtype == jnp.float64 and traced.weak_type and float(traced) == 0.1
        big = eqx.filter_jit(lambda model: model.factor)(Scale(2**31 - 1))
        assert big.dtype == jnp.int64 and big.weak_type
        assert Scale(0.1 + 0.2j).factor == 0.1 + 0.2j
    assert m.factor == 0.1


def test_ensemble_of_rates_under_filter_vmap():
    @eqx.filter_vmap
    def make(rate):
        return Scale(rate)

    # Building under `filter_vmap` gives traced rates: stored as they are (arrays).
    models = make(jnp.array([0.5, 2.0]))
    out = eqx.filter_vmap(lambda m, x: m(x), in_axes=(eqx.if_array(0), None))(models, 3.0)
    np.testing.assert_allclose(out, [1.5, 6.0])
    # Stacked from Python numbers: the bits stack, and read back per member.
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), Scale(0.5), Scale(2.0))
    out = eqx.filter_vmap(lambda m, x: m(x), in_axes=(eqx.if_array(0), None))(stacked, 3.0)
    np.testing.assert_allclose(out, [1.5, 6.0])


@pytest.mark.parametrize(
    "clone", [copy.copy, copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))]
)
def test_copies_keep_the_value(clone):
    m = clone(Scale(0.25))
    assert type(m.factor) is float and m.factor == 0.25
    np.testing.assert_allclose(m(jnp.ones(2)), 0.25)


class IntArrayRegressor(eqx.Module):
    linear: eqx.nn.Linear
    steps: jax.Array

    def __call__(self, x):
        return self.linear(x)


def _init_and_step_on_all_arrays(model, optim):
    # `eqx.filter(model, eqx.is_array)` as the optimiser's parameters (attack5b-06).
    xs, ys = jnp.ones((4, 3)), jnp.ones(4)
    params = eqx.filter(model, eqx.is_array)
    grads = eqx.filter_grad(lambda m: jnp.mean((jax.vmap(m)(xs)[:, 0] - ys) ** 2))(model)
    updates, _ = optim.update(grads, optim.init(params), params)
    return eqx.apply_updates(model, updates)


@pytest.mark.parametrize("optim", [optax.adam(1e-2), optax.sgd(1e-2, momentum=0.9)])
def test_an_optimiser_on_all_array_leaves_does_what_it_does_to_any_integer_array(optim):
    # What docs/stable_module.md says: to `eqx.is_array` the stored words are an integer array
    # (they must be, for `eqx.filter_jit` to trace them), which the gradients never hold; an
    # optax optimiser that compares its state with the gradients (adam, in recent optax)
    # then fails exactly as it does on an integer array in a plain `eqx.Module`. Set up with
    # `eqx.is_inexact_array`, the loop trains (`test_the_standard_loop_...`).
    key = jr.key(0)
    stable = StableRegressor(0.1, key)
    plain = IntArrayRegressor(eqx.nn.Linear(3, 1, key=key), jnp.array(3, jnp.int32))
    outcomes = []
    for model in (stable, plain):
        try:
            outcomes.append(_init_and_step_on_all_arrays(model, optim))
        except ValueError:
            # JAX's own message, which differs between versions ("pytree structure error" on
            # JAX 0.10, "Expected None, got Array" on JAX 0.5, where sgd with momentum fails too).
            outcomes.append(None)
    assert (outcomes[0] is None) == (outcomes[1] is None)
    if outcomes[0] is not None:
        # Where the optimiser gets through, the field comes out untouched.
        assert outcomes[0].weight_decay == 0.1 and int(outcomes[1].steps) == 3
