"""`jax.clear_caches()` between two equal calls: JAX drops every program, and both Equinox and
eqxstable trace and compile again (nothing for eqxstable to avoid)."""

import equinox as eqx
import jax
import jax.numpy as jnp


@eqx.filter_jit
def f(x):
    return jnp.sin(x) * 2


x = jnp.ones(3)
print(f(x))
jax.clear_caches()
print(f(x))
print(eqx.filter_jit(lambda y: y + 1)(x))
jax.clear_caches()
print(eqx.filter_jit(lambda y: y + 1)(x))
