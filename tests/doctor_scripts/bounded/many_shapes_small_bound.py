"""One static value called with more shapes than eqxstable's bound on a wrapper's programs (set
small here, as `EQXSTABLE_MAX_ENTRIES=2` would): eqxstable drops the entry with its programs
once they exceed the bound, and traces again; Equinox keeps every shape's program (JAX's own
bound is 8192), so the second round is all hits there (attack 9b-04)."""

import equinox as eqx
import jax.numpy as jnp

from eqxstable._jit import sizes


sizes.entries = 2


@eqx.filter_jit
def double(x):
    return x * 2


for _ in range(2):
    for s in range(1, 9):
        print(double(jnp.ones(s)).sum())
