"""A call that ran a program compiled for an equal trace (a guest, no compile), then called with
a new shape, then with the old one again; and the owner of that program the same (attack 7b-14).
Each takes a token of its own for the new shape and keeps running the shared program for the
old one: no trace, no compile, as Equinox's cache hits; the shared program, traced once,
takes a new guest."""

import equinox as eqx
import jax.numpy as jnp


def make():
    # A fresh dict each time: keyed by identity, so each rebuilt function is a new cache entry,
    # whose trace is equal to the first one's.
    config = {"scale": 2.0}
    return lambda b: jnp.cumsum(b) * config["scale"]


@eqx.filter_jit
def solve(f, b):
    return f(b) + 1.0


a, b = jnp.arange(3.0), jnp.arange(4.0)
f1, f2, f3 = make(), make(), make()
print(solve(f1, a))
print(solve(f2, a))
# The guest at a new shape: traced and compiled under its own token.
print(solve(f2, b))
# The old shape again: the shared program (a hit).
print(solve(f2, a))
# The owner at a new shape, then the old one: the same.
print(solve(f1, b))
print(solve(f1, a))
# A third equal function: the shared program still stands for its one trace, a guest again.
print(solve(f3, a))
