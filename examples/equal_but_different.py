"""Equinox and eqxstable differ on static values both ways: a rebuilt lambda (eqxstable reuses
the program), `1` then `1.0` as an argument and in a static field (Equinox reuses the program
and returns the wrong dtype), a list captured by a closure and changed in place (Equinox reuses
the program traced for the old contents), and a jitted lambda wrapped again in a loop. The
doctor marks the first kind [eqxstable avoids] and the second [eqxstable compiles].

Run: `python -m eqxstable doctor examples/equal_but_different.py`
"""

import equinox as eqx
import jax.numpy as jnp


class Scale(eqx.Module):
    factor: object = eqx.field(static=True)


@eqx.filter_jit
def scale(x, factor):
    return x * factor


@eqx.filter_jit
def scale_by(model, x):
    return x * model.factor


@eqx.filter_jit
def activate(fn, x):
    return fn(x)


ints = jnp.arange(3)
print(scale(ints, 2).dtype, scale(ints, 2.0).dtype, scale(ints, 3).dtype)
print(scale_by(Scale(2), ints).dtype, scale_by(Scale(2.0), ints).dtype)
for _ in range(3):
    activate(lambda z: z * 0.5, jnp.ones(2))
activate(lambda z: z * 0.5, jnp.ones(4))
offsets = [1.0]
shift = lambda z: z + offsets[0]  # noqa: E731
print(activate(shift, jnp.ones(2)))
offsets[0] = 5.0
print(activate(shift, jnp.ones(2)))
for _ in range(3):
    eqx.filter_jit(lambda x: x - 1)(jnp.ones(2))
