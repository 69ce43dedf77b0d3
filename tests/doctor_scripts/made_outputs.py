"""A step whose output holds an object its trace made (a `Log()`): eqxstable's `filter_jit`
returns each trace's own object to the calls of the objects that traced it, so the entry is
pinned to them (`_jit/_outputs.py`, `Cache.pin`), and a lambda rebuilt each iteration traces
again, as under Equinox. Each such trace is equal to the first, and runs its program (no
compile), with its own `Log()`. The same objects called again are served their trace's object.
The prediction must pin as the jit layer does (attack 13b-01: predicted 1 miss where
`--stabilize` makes 5)."""

import equinox as eqx
import jax.numpy as jnp


class Log:
    def __init__(self):
        self.items = []


@eqx.filter_jit
def step(x, act):
    return act(x), Log()


x = jnp.ones(3)
logs = []
for i in range(4):
    act = lambda v: v * 2.0  # noqa: E731 - rebuilt each iteration
    y, log = step(x, act)
    y2, log2 = step(x, act)
    logs.append(log)
    print(y, log is log2, any(log is other for other in logs[:-1]))
