"""A client program of lineax (installed): `linear_solve` (an `equinox.filter_jit` holding an
`equinox.internal` `filter_primitive`) with a solver rebuilt over a fresh closure, then
differentiated through, as optimistix's least-squares solvers call it. The rebuilt solver's
call runs the program compiled for the first one (a guest); under `jax.grad` it traces again."""

import jax
import jax.numpy as jnp
import lineax as lx


def solver():
    # A fresh dict each time: the norm is keyed by identity, so a new cache entry, whose trace
    # equals the first one's.
    config = {"ord": jnp.inf}
    return lx.BiCGStab(rtol=1e-6, atol=1e-6, norm=lambda x: jnp.linalg.norm(x, config["ord"]))


matrix = jnp.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]])
operator = lx.MatrixLinearOperator(matrix)
b = jnp.arange(1.0, 4.0)
s1, s2 = solver(), solver()
print(lx.linear_solve(operator, b, s1).value.round(4))
print(lx.linear_solve(operator, b, s2).value.round(4))


def loss(v):
    return lx.linear_solve(operator, v, s2).value.sum()


print(jax.grad(loss)(b).round(4))
print(lx.linear_solve(operator, b, s2).value.round(4))
