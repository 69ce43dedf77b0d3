"""An `equinox.filter_jit` called inside transformations (an outer `jax.jit`, `jax.grad`,
`jax.vmap`) and at top level, as a library's solver is called by its users (lineax's
`linear_solve` in its own test suite). Under a transformation JAX only traces the function (and
compiles programs of its own: a JVP, a batched jaxpr); a later call at top level compiles what
was traced. The prediction must count these as `--stabilize` does."""

import equinox as eqx
import jax
import jax.numpy as jnp


@eqx.filter_jit
def solve(a, b):
    return a * b + 1


@jax.jit
def outer(v):
    return solve(v, 2.0)


@jax.jit
def outer3(v):
    return solve(v, 3.0)


x3, x4 = jnp.ones(3), jnp.ones(4)
# Traced inside an outer trace, then compiled at top level for the same types.
print(outer(x3))
print(solve(x3, 2.0))
# Types already traced: JAX reuses the trace (and compiles its own JVP and batched programs).
print(jax.grad(lambda v: solve(v, 2.0).sum())(x3))
print(jax.vmap(lambda v: solve(v, 2.0))(jnp.ones((2, 3))))
print(solve(x3, 2.0))
# Two shapes traced inside outer traces, then both compiled at top level.
print(outer3(x3))
print(outer3(x4))
print(solve(x3, 3.0))
print(solve(x4, 3.0))
# Compiled at top level first: the transformed call finds JAX's trace.
print(solve(jnp.ones(5), 2.0))
print(jax.grad(lambda v: solve(v, 2.0).sum())(jnp.ones(5)))
