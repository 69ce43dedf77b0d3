"""A `filter_jit` function called from a `custom_jvp` rule inside another `filter_jit`, as an
implicit solve calls a linear solve: `jax.grad` of the outer function traces the rule while JAX
transforms the outer jaxpr, under the outer function's own mesh, another trace context than the
outer trace's. JAX keys its caches by that context, so the inner function is traced again for
argument types it traced already: a miss under eqxstable's `filter_jit` as under Equinox, which
the prediction must count although nothing in the arguments changed."""

import equinox as eqx
import jax
import jax.numpy as jnp


@eqx.filter_jit
def apply(f, x):
    return f(x)


def wave(x):
    return jnp.sin(x)


@jax.custom_jvp
def smooth(x):
    return apply(wave, x)


@smooth.defjvp
def smooth_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    # The rule calls `apply` with the same arguments as the primal: traced in another context.
    return apply(wave, x), jnp.cos(x) * t


@eqx.filter_jit
def model(x):
    return smooth(x) * 2.0


x = jnp.array(1.0)
print(jax.grad(model)(x))
# Equal types again: JAX's caches hold both traces now.
print(jax.grad(model)(x + 1.0))
# Rebuilt closures at top level: the miss eqxstable avoids, so that the prediction says something.
for scale in (3.0, 3.0):
    print(apply(lambda v: v * scale, x))
