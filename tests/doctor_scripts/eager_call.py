"""A call under `jax.disable_jit()` runs eagerly: nothing is traced or compiled, under Equinox as
under eqxstable, so the first call after it is the first trace."""

import equinox as eqx
import jax
import jax.numpy as jnp


@eqx.filter_jit
def f(x, k):
    return x * k


x = jnp.ones(3)
with jax.disable_jit():
    print(f(x, 2))
print(f(x, 2))
print(f(x, 2))
with jax.disable_jit():
    print(f(x, 3))
print(f(x, 3))
