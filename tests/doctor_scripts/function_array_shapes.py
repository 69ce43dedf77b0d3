"""A module jitted itself (`eqx.filter_jit(scale)`), rebuilt with a weight of another shape: its
weights are arguments of the program, so the new shape is a miss at `fun.weight` both ways, and
rebuilt at the first shape again, a hit for eqxstable (Equinox compiles each new object again)."""

import equinox as eqx
import jax.numpy as jnp


class Scale(eqx.Module):
    weight: jnp.ndarray

    def __call__(self, x):
        return self.weight * x


for n in (3, 4, 3):
    print(eqx.filter_jit(Scale(jnp.ones(n)))(jnp.asarray(2.0)).tolist())
