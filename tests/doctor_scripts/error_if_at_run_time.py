"""An `eqx.error_if` that fails while the program runs, on the first call (a miss) and on two
hits, then a call that passes: four calls, one miss that traced and compiled."""

import equinox as eqx
import jax.numpy as jnp


@eqx.filter_jit
def checked(x):
    return eqx.error_if(x, x > 0, "positive input")


failures = 0
for _ in range(3):
    try:
        checked(jnp.ones(()))
    except eqx.EquinoxRuntimeError:
        failures += 1
print(failures, float(checked(-jnp.ones(()))))
