"""An `equinox.filter_jit` called only inside an outer `jax.jit` is traced into the outer program
(once per shape) and compiles nothing of its own, under Equinox as under eqxstable's `filter_jit`:
its row says so and counts no compile, and the outer `jax.jit` compiles once per shape (attack
13b-07: the row said "traced and compiled" and `filter_jit_compiles` counted it)."""

import equinox as eqx
import jax
import jax.numpy as jnp


@eqx.filter_jit
def inner(x):
    return x * 2.0


@jax.jit
def outer(x):
    return inner(x) + 1.0


print(outer(jnp.ones(2)))
print(outer(jnp.ones(3)))
print(outer(jnp.ones(2)))
