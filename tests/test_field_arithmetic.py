"""Arithmetic over every array leaf of a model with a dynamic field (an EMA or Polyak update of a
target network) gives the right value or raises an error that names the field and the fix; it
never gives a silent number (issue 21)."""

import pickle
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqxstable as es


class Net(es.StableModule):
    weight: jax.Array
    rate: float = es.field(dynamic=True)
    steps: int = es.field(dynamic=True)
    phase: complex = es.field(dynamic=True)


def _nets(rate_a=0.5, rate_b=0.5):
    return Net(jnp.ones(2), rate_a, 3, 1j), Net(jnp.zeros(2), rate_b, 3, 1j)


def _ema(a, b):
    return jax.tree.map(lambda x, y: 0.9 * x + 0.1 * y, a, b)


@pytest.mark.parametrize(
    "update",
    [_ema, lambda a, b: optax.incremental_update(a, b, 0.1), eqx.filter_jit(_ema)],
    ids=["tree_map", "optax", "under_jit"],
)
def test_float_arithmetic_over_all_arrays_raises_naming_the_field(update):
    online, target = _nets()
    a, _ = eqx.partition(online, eqx.is_array)
    b, _ = eqx.partition(target, eqx.is_array)
    with pytest.raises(ValueError, match=r"`Net\.(rate|steps|phase)`.*is_inexact_array"):
        update(a, b)


def test_integer_arithmetic_keeps_an_equal_value_and_refuses_a_mixed_one():
    online, target = _nets()
    midpoint: Any = jax.tree.map(lambda x, y: x + (y - x) // 2, online, target)
    assert float(midpoint.rate) == 0.5 and int(midpoint.steps) == 3
    assert complex(midpoint.phase) == 1j
    # Adding one to every leaf moves each stored word by one unit: the two precisions disagree.
    shifted: Any = jax.tree.map(lambda x: x + 1, online)
    with pytest.raises(ValueError, match=r"`Net\.rate`.*no longer agree"):
        _ = shifted.rate


def test_the_inexact_partition_leaves_the_field_as_it_was():
    online, target = _nets(0.5, 0.25)
    a, static = eqx.partition(online, eqx.is_inexact_array)
    b, _ = eqx.partition(target, eqx.is_inexact_array)
    new: Any = eqx.combine(optax.incremental_update(a, b, 0.1), static)
    np.testing.assert_allclose(new.weight, 0.1 * np.ones(2), rtol=1e-6)
    assert float(new.rate) == 0.5 and int(new.steps) == 3 and complex(new.phase) == 1j


def test_weight_decay_and_gradients_never_touch_the_field():
    model: Any = Net(jnp.ones(2), 0.5, 3, 1j)
    optim = optax.adamw(0.1, weight_decay=0.5)
    state = optim.init(eqx.filter(model, eqx.is_inexact_array))
    for _ in range(3):
        grads: Any = eqx.filter_grad(lambda m: jnp.sum(m.weight * m.rate))(model)
        updates, state = optim.update(grads, state, eqx.filter(model, eqx.is_inexact_array))
        model: Any = eqx.apply_updates(model, updates)
    assert float(model.rate) == 0.5 and int(model.steps) == 3 and complex(model.phase) == 1j
    assert not np.allclose(model.weight, 1.0)


def test_integer_cotangents_and_shapes_pass():
    model: Any = Net(jnp.ones(2), 0.5, 3, 1j)
    grads: Any = jax.grad(lambda m: jnp.sum(m.weight), allow_int=True)(model)
    assert float(grads.weight[0]) == 1.0
    shapes: Any = eqx.filter_eval_shape(lambda m: m, model)
    assert shapes.weight.shape == (2,)
    stacked: Any = jax.tree.map(lambda *xs: jnp.stack(xs), model, model)
    assert stacked.rate.shape == (2,)


def test_pickle_keeps_the_name():
    online, target = _nets()
    copy: Any = pickle.loads(pickle.dumps(online))
    assert float(copy.rate) == 0.5
    with pytest.raises(ValueError, match=r"`Net\.rate`"):
        jax.tree.map(lambda x: x * 1.5, eqx.filter(copy, lambda x: x is copy.__dict__["rate"].bits))
