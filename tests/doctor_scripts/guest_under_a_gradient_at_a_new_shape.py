"""A guest (a call that ran a program compiled for an equal trace) differentiated at a new
shape, then called at its old shape and others, and a third equal function, and the owner of the
shared program differentiated at the new shape. Under a transformation a guest traces under a
token of its own; at top level it still runs the shared program for the types it ran it for (no
trace, no compile), and the shared program, traced once, takes the third function as a guest."""

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


x, y = jnp.ones(3), jnp.ones(4)
f1, f2, f3 = make(), make(), make()
print(solve(f1, x))
print(solve(f2, x))
print(jax.grad(lambda v: solve(f2, v).sum())(y))
print(solve(f2, x))
print(solve(f2, y))
print(jax.grad(lambda v: solve(f2, v).sum())(x))
print(solve(f2, x))
print(solve(f3, x))
print(jax.grad(lambda v: solve(f1, v).sum())(y))
