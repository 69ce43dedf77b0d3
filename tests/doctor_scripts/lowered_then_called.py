"""An ahead-of-time warm-up: `f.lower(x, 2).compile()`, then calls. Equinox's `.lower()` traces
(no call of its row); under eqxstable it is a miss that compiles nothing, its `.compile()` compiles
the trace, and the call `f(x, 2)` runs that program (a hit, not a compile of its own)."""

import equinox as eqx
import jax.numpy as jnp


@eqx.filter_jit
def f(x, n):
    return x * n


x = jnp.ones(3)
compiled = f.lower(x, 2).compile()  # pyright: ignore[reportFunctionMemberAccess]
print(compiled(x, 2))
print(f(x, 2))
print(f(x, 3))
