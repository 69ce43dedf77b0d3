"""Plain `jax.jit`, no `filter_jit` at all: `power` compiles three times, once for each value of
its static argument; `shift` once per input type. The doctor counts and explains these compiles
with JAX's own cache-miss explanations.

Run: `python -m eqxstable doctor examples/jax_jit.py`
"""

from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnums=1)
def power(x, n):
    return x**n


@jax.jit
def shift(x):
    return x + 1


x = jnp.arange(3.0)
for n in (1, 2, 3, 2, 1):
    y = power(x, n)
shift(x)
shift(jnp.arange(4.0))
print(shift(jnp.arange(4)))
