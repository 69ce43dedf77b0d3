"""A call that ran a program compiled for an equal trace (a guest, no compile) and is then
called under `jax.grad`, as a solver is called with a rebuilt operator and then differentiated
through. A guest under a transformation detaches to the token of its own first trace, which JAX
still holds: no new trace (attack 9b-06), as the prediction must count it."""

import equinox as eqx
import jax
import jax.numpy as jnp


def make():
    # A fresh dict each time: keyed by identity, so each rebuilt function is a new cache entry,
    # whose trace is equal to the first one's.
    config = {"scale": 2.0}
    return lambda b: b * config["scale"]


@eqx.filter_jit
def solve(f, b):
    return f(b) + 1.0


x = jnp.ones(3)
f1, f2 = make(), make()
print(solve(f1, x))
print(solve(f2, x))
# The guest under a transformation: its own first trace, under its own token (no trace).
print(jax.grad(lambda v: solve(f2, v).sum())(x))
# At top level again: the first compile of what the transformed call traced is no miss.
print(solve(f2, x))
print(jax.grad(lambda v: solve(f2, v).sum())(x))
# The entry that owns the shared program, under the transformation: JAX's trace, no miss.
print(jax.grad(lambda v: solve(f1, v).sum())(x))
