"""One process of the two-process training run in `test_multiprocess.py`, and the training code
that the test also runs in its own process for the single-process answer.

Run as `python -m tests.multidevice._worker PROCESS_ID NUM_PROCESSES PORT STEPS` from the
repository root, with `XLA_FLAGS=--xla_force_host_platform_device_count=2`. It joins
`jax.distributed` over 127.0.0.1, trains on a data-sharded global batch over a mesh of every
process's devices, rebuilding the model every step, and prints one JSON line (prefixed by
`RESULT `) with what the test checks.
"""

import json
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqxstable as es


BATCH = 8
FEATURES = 4
LEARNING_RATE = 0.1


class Model(es.StableModule):
    weight: jax.Array
    bias: jax.Array
    activation: Callable[[jax.Array], jax.Array]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.activation(x @ self.weight + self.bias)


def build_model(weight: jax.Array, bias: jax.Array) -> Model:
    # A new lambda on every rebuild: the same code, so `StableModule` interns it to one object
    # and the step does not recompile.
    return Model(weight, bias, lambda x: jnp.tanh(x))


def initial_params() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    return weight, np.zeros((1,), np.float32)


def global_batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The whole batch of one step, the same in every process (each uses its own rows)."""
    rng = np.random.default_rng(1000 + step)
    x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    return x, y


def make_train_step() -> tuple[Any, Callable[[], int]]:
    """A fresh stable `filter_jit` training step and a function that reads its trace count."""
    traces = 0

    def loss_fn(model: Model, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((model(x) - y) ** 2)

    @es.filter_jit
    def train_step(model: Model, x: jax.Array, y: jax.Array):
        nonlocal traces
        traces += 1
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
        weight = model.weight - LEARNING_RATE * grads.weight
        bias = model.bias - LEARNING_RATE * grads.bias
        return loss, weight, bias

    return train_step, lambda: traces


def train(
    steps: int,
    place_params: Callable[[np.ndarray], jax.Array] = jnp.asarray,
    place_batch: Callable[[np.ndarray], jax.Array] = jnp.asarray,
) -> dict[str, Any]:
    """Trains for `steps` steps, rebuilding the model every step.

    **Arguments:**

    - `steps`: how many training steps.
    - `place_params`: turns a NumPy parameter into a JAX array (replicated, in the workers).
    - `place_batch`: turns a whole NumPy batch into a JAX array (sharded by rows, in the workers).

    **Returns:** the losses, the final parameters (as lists), the trace count, `cache_info()`, the
    kinds of the misses, the final weight's sharding and `es.report()`.
    """
    train_step, traces = make_train_step()
    weight, bias = map(place_params, initial_params())
    losses = []
    for step in range(steps):
        x, y = map(place_batch, global_batch(step))
        loss, weight, bias = train_step(build_model(weight, bias), x, y)
        losses.append(loss)
    return {
        "losses": [float(_local(loss)) for loss in losses],
        "weight": _local(weight).tolist(),
        "bias": _local(bias).tolist(),
        "traces": traces(),
        "cache_info": list(train_step.cache_info()[:4]),
        "misses": [miss.kind for miss in train_step.misses],
        "weight_sharding": str(weight.sharding),
        # Taken while `train_step` is alive: the report lists live wrappers only.
        "report": es.report(),
    }


def _local(x: jax.Array) -> np.ndarray:
    # A replicated global array is readable from any of this process's shards.
    return np.asarray(x.addressable_shards[0].data)


def main(process_id: int, num_processes: int, port: int, steps: int) -> None:
    from jax.sharding import NamedSharding, PartitionSpec

    from tests.helpers import compile_log

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=num_processes,
        process_id=process_id,
    )
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    by_rows = NamedSharding(mesh, PartitionSpec("data"))
    rows = BATCH // num_processes

    def place_params(value: np.ndarray) -> jax.Array:
        return jax.make_array_from_process_local_data(replicated, value, value.shape)

    def place_batch(value: np.ndarray) -> jax.Array:
        local = value[process_id * rows : (process_id + 1) * rows]
        return jax.make_array_from_process_local_data(by_rows, local, value.shape)

    with compile_log() as log:
        result = train(steps, place_params, place_batch)
    result.update(
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        device_count=jax.device_count(),
        local_device_count=jax.local_device_count(),
        compiles=log.count("train_step"),
    )
    print("RESULT " + json.dumps(result), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:5]))
