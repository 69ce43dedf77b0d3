"""Functions whose programs call Python while they run (a `jax.pure_callback`) are pinned by
eqxstable's `filter_jit`: a program serves only the objects that traced it and is never run for
another trace, so equal functions defined twice compile twice, and a function rebuilt by a factory
(the same key) traces and compiles again for each new object, as under Equinox. Functions that
only print plain values (`jax.debug.print`) are not pinned: the second runs the first's program.
The prediction must pin as the jit layer does (issue 19)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


def double(x):
    return np.asarray(x) * 2


def call_back(x):
    return jax.pure_callback(double, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def make():
    return eqx.filter_jit(lambda x: call_back(x) + 1)


x = jnp.ones(2)
f1 = eqx.filter_jit(lambda x: call_back(x) + 1)
f2 = eqx.filter_jit(lambda x: call_back(x) + 1)
f3 = eqx.filter_jit(lambda x: jax.debug.print("v {}", x) or x + 1)
f4 = eqx.filter_jit(lambda x: jax.debug.print("v {}", x) or x + 1)
for f in [f1, f2, f3, f4, f1]:
    print(f(x))
for _ in range(3):
    print(make()(x))
