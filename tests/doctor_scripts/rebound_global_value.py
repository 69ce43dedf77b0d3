"""A global the jitted function reads is changed between calls: Equinox keeps serving the program
traced with the old value (the second result is stale), eqxstable traces again."""

import equinox as eqx
import jax.numpy as jnp


scale = 2.0


@eqx.filter_jit
def apply(x):
    return x * scale


print(apply(jnp.ones(2)))
scale = 3.0
print(apply(jnp.ones(2)))
