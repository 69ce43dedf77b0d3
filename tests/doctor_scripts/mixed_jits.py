"""A script with all three: a stable `filter_jit` of its own, an `equinox.filter_jit` that donates
its arguments and traces a counter, a method, and a plain `jax.jit` called inside and outside."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

import eqxstable as es


traces = 0


@jax.jit
def double(x):
    return 2 * x


@eqx.filter_jit(donate="all")
def step(x, flag):
    global traces
    traces += 1
    return double(x) + 1 if flag else x


@es.filter_jit
def norm(x):
    return jnp.sqrt(jnp.sum(x**2))


class Affine(eqx.Module):
    weight: jax.Array
    act: Callable

    @eqx.filter_jit
    def __call__(self, x):
        return self.act(self.weight * x)


for n, flag in [(2, True), (2, True), (3, True), (3, False), (2, True)]:
    y = step(jnp.ones(n), flag)
    norm(y)
print(double(jnp.ones(2)))
for _ in range(2):
    Affine(jnp.ones(2), lambda z: z * 2)(jnp.ones(2))
print("traces", traces)
