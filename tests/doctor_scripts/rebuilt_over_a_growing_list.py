"""A function rebuilt by a factory whose trace appends to a shared global list: after each trace
the list is longer, so each rebuilt function has another key than the one before. The program
filed under the key a function has after its trace serves the very function that traced it, never
a rebuilt one (CONTRACT section 1), so under eqxstable's `filter_jit` each rebuilt function traces,
as under Equinox: the doctor must not predict them avoided. The first function, wrapped again
after the list grew, has yet another key: eqxstable traces it again (it reads `len(log)`), where
Equinox serves its first program."""

import equinox as eqx
import jax.numpy as jnp


log = []


def make():
    def f(x):
        log.append(1)
        return x * len(log)

    return f


f = make()
w = eqx.filter_jit(f)
for _ in range(3):
    print(w(jnp.ones(2)))
for _ in range(3):
    print(eqx.filter_jit(make())(jnp.ones(2)))
print(eqx.filter_jit(f)(jnp.ones(2)))
