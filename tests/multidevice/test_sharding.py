"""The stable `filter_jit` on a mesh of 8 (fake CPU) devices: shardings in and out are JAX's own,
donation frees sharded inputs, a rebuilt `StableModule` with sharded leaves compiles once, and a
new input sharding is a miss of kind `"sharding"` that names both shardings.

`scripts/test.sh` runs this file with `XLA_FLAGS=--xla_force_host_platform_device_count=8`.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

import eqxstable as es

from ..helpers import compile_log


BATCH, IN, OUT = 8, 16, 8


class Dense(es.StableModule):
    weight: jax.Array
    bias: jax.Array
    activation: Callable[[jax.Array], jax.Array]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.activation(x @ self.weight + self.bias)


def _mesh(axis_type: AxisType = AxisType.Explicit) -> Mesh:
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(axis_type, axis_type))


def _params() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, IN)).astype(np.float32)
    weight = rng.normal(size=(IN, OUT)).astype(np.float32)
    bias = rng.normal(size=(OUT,)).astype(np.float32)
    return x, weight, bias


def _placed(mesh: Mesh) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The batch split by rows over `data`, the layer's outputs split over `model`."""
    x, weight, bias = _params()
    return (
        jax.device_put(x, NamedSharding(mesh, P("data", None))),
        jax.device_put(weight, NamedSharding(mesh, P(None, "model"))),
        jax.device_put(bias, NamedSharding(mesh, P("model"))),
    )


def _build(weight: jax.Array, bias: jax.Array) -> Dense:
    # A new lambda each rebuild; `StableModule` interns it, so the rebuilt model is the same key.
    return Dense(weight, bias, lambda y: jnp.maximum(y, 0.0))


def _reference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return np.maximum(x @ weight + bias, 0.0)


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto])
def test_shardings_of_inputs_and_outputs_are_kept(axis_type):
    mesh = _mesh(axis_type)
    x, weight, bias = _placed(mesh)
    lr = 0.1

    @es.filter_jit
    def step(model: Dense, x: jax.Array):
        def loss(model):
            return jnp.mean(model(x) ** 2)

        grads = eqx.filter_grad(loss)(model)
        weight = model.weight - lr * grads.weight
        updated = Dense(weight, model.bias - lr * grads.bias, model.activation)
        return model(x), updated

    model = _build(weight, bias)
    # Construction leaves the arrays alone: still sharded as placed.
    assert model.weight.sharding == weight.sharding
    out, updated = step(model, x)
    assert out.sharding == NamedSharding(mesh, P("data", "model"))
    assert updated.weight.sharding == weight.sharding
    assert updated.bias.sharding == bias.sharding
    assert x.sharding == NamedSharding(mesh, P("data", None))
    np.testing.assert_allclose(np.asarray(out), _reference(*_params()), rtol=1e-5, atol=1e-5)


def test_donated_sharded_inputs_are_deleted():
    mesh = _mesh()
    x, weight, bias = _placed(mesh)
    x_sharding = x.sharding

    @es.filter_jit(donate="all")
    def scale(model: Dense, x: jax.Array):
        return Dense(2.0 * model.weight, 2.0 * model.bias, model.activation), x + 1.0

    model = _build(weight, bias)
    new_model, new_x = scale(model, x)
    assert x.is_deleted()
    assert model.weight.is_deleted()
    assert model.bias.is_deleted()
    assert new_x.sharding == x_sharding
    assert new_model.weight.sharding == NamedSharding(mesh, P(None, "model"))
    x_np, weight_np, bias_np = _params()
    np.testing.assert_array_equal(np.asarray(new_x), x_np + 1.0)
    np.testing.assert_array_equal(np.asarray(new_model.weight), 2.0 * weight_np)
    np.testing.assert_array_equal(np.asarray(new_model.bias), 2.0 * bias_np)


def test_rebuilt_sharded_module_compiles_once():
    mesh = _mesh()
    x, weight, bias = _placed(mesh)
    traces = 0

    def apply(model: Dense, x: jax.Array) -> jax.Array:
        nonlocal traces
        traces += 1
        return model(x)

    jitted = es.filter_jit(apply)
    with compile_log() as log:
        outs = [jitted(_build(weight, bias), x) for _ in range(5)]
    assert traces == 1
    assert log.count("apply") == 1
    assert jitted.cache_info()[:4] == (4, 1, 4096, 1)
    assert [miss.kind for miss in jitted.misses] == ["first"]
    expected = _reference(*_params())
    for out in outs:
        assert out.sharding == NamedSharding(mesh, P("data", "model"))
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


def _single_device(x: np.ndarray) -> jax.Array:
    return jax.device_put(x, jax.devices()[0])


def _rows(mesh: Mesh) -> Callable[[np.ndarray], jax.Array]:
    return lambda x: jax.device_put(x, NamedSharding(mesh, P("data", None)))


def _columns(mesh: Mesh) -> Callable[[np.ndarray], jax.Array]:
    return lambda x: jax.device_put(x, NamedSharding(mesh, P(None, "model")))


@pytest.mark.parametrize(
    "axis_type, first, second, traces",
    [
        # Explicit axes put the sharding in the array's type, so JAX traces again.
        (AxisType.Explicit, _rows, _columns, 2),
        # Auto axes do not: JAX only lowers and compiles again, and the miss is still counted.
        (AxisType.Auto, _rows, _columns, 1),
        # One device to many is a new type in either mode.
        (AxisType.Auto, lambda mesh: _single_device, _rows, 2),
    ],
)
def test_new_sharding_is_a_sharding_miss_naming_both(axis_type, first, second, traces):
    mesh = _mesh(axis_type)
    x_np, weight_np, bias_np = _params()
    try:
        _ = _columns(mesh)(x_np) @ jnp.asarray(weight_np)
    except Exception as e:  # JAX 0.5 and 0.6: "Mesh of both lhs and rhs should match".
        pytest.skip(f"this JAX cannot multiply an explicitly sharded array by another: {e}")
    counted = 0

    def apply(model: Dense, x: jax.Array) -> jax.Array:
        nonlocal counted
        counted += 1
        return model(x)

    # Wrappers of equivalent functions share one program, and every case of this test defines an
    # equivalent `apply` (same code, `counted == 0`): a fresh start keeps each counter its own.
    es.clear_caches()
    jitted = es.filter_jit(apply)
    model = _build(jnp.asarray(weight_np), jnp.asarray(bias_np))
    old, new = first(mesh)(x_np), second(mesh)(x_np)
    with compile_log() as log:
        out_old = jitted(model, old)
        out_new = jitted(model, new)
    assert counted == traces
    assert log.count("apply") == 2
    assert jitted.cache_info()[:4] == (0, 2, 4096, 2)
    miss = jitted.misses[-1]
    assert miss.kind == "sharding"
    assert miss.path == "args[1]"
    assert str(old.sharding) in miss.reason
    assert str(new.sharding) in miss.reason
    assert "sharding" in jitted.explain()
    expected = _reference(x_np, weight_np, bias_np)
    np.testing.assert_allclose(np.asarray(out_old), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out_new), expected, rtol=1e-5, atol=1e-5)
    # Back to the first sharding: a hit, not a third program.
    jitted(model, first(mesh)(x_np))
    assert jitted.cache_info()[:2] == (1, 2)


# Module level, so that every hypothesis example calls the same wrapper. No mesh is built at import
# time: collecting this file on one device must not fail.
_SHARDED_APPLY = es.filter_jit(lambda model, x: model(x))


@settings(max_examples=25)
@given(
    x=hnp.arrays(np.float32, (BATCH, IN), elements=st.floats(-10, 10, width=32)),
    weight=hnp.arrays(np.float32, (IN, OUT), elements=st.floats(-10, 10, width=32)),
    bias=hnp.arrays(np.float32, (OUT,), elements=st.floats(-10, 10, width=32)),
)
def test_sharded_equals_unsharded(x, weight, bias):
    mesh = _mesh()
    sharded_x, sharded_weight, sharded_bias = (
        jax.device_put(x, NamedSharding(mesh, P("data", None))),
        jax.device_put(weight, NamedSharding(mesh, P(None, "model"))),
        jax.device_put(bias, NamedSharding(mesh, P("model"))),
    )
    sharded = _SHARDED_APPLY(_build(sharded_weight, sharded_bias), sharded_x)
    unsharded = _SHARDED_APPLY(_build(jnp.asarray(weight), jnp.asarray(bias)), jnp.asarray(x))
    assert sharded.sharding == NamedSharding(mesh, P("data", "model"))
    # The contraction is not split, so each device sums the same terms in the same order.
    np.testing.assert_allclose(np.asarray(sharded), np.asarray(unsharded), rtol=1e-6, atol=1e-5)
    expected = _reference(x, weight, bias)
    np.testing.assert_allclose(np.asarray(sharded), expected, rtol=1e-5, atol=1e-4)
    # Two placements, two programs, however many examples ran.
    assert _SHARDED_APPLY.cache_info().currsize == 2
