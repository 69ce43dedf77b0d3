"""Modules jitted themselves (`eqx.filter_jit(model)`): their weights are arguments of the
program. Rebuilt with new weights of the same shapes they reuse it; wider, they compile again; with
a lambda activation rebuilt each time, Equinox compiles again and eqxstable does not."""

import equinox as eqx
import jax
import jax.numpy as jnp


for seed in range(3):
    model = eqx.nn.Linear(2, 3, key=jax.random.key(seed))
    print(eqx.filter_jit(model)(jnp.ones(2)).shape)
wide = eqx.filter_jit(eqx.nn.Linear(4, 3, key=jax.random.key(0)))
for _ in range(2):
    print(wide(jnp.ones(4)).shape)
for seed in range(3):
    mlp = eqx.nn.MLP(2, 2, 4, 1, activation=lambda z: z / 2, key=jax.random.key(seed))
    print(eqx.filter_jit(mlp)(jnp.ones(2)).shape)
