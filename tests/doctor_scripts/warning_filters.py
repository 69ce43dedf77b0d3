"""An equivalent lambda rebuilt each iteration, called under alternating warning filters (as
`pytest -W error` and each test's `catch_warnings` set them): eqxstable's `filter_jit` keys the
filters wherever it keys a function anew (`_jit/_ambient.py`), so the rebuilt lambda traces again
under new filters and is served under filters it traced with. The doctor keys the script's calls
with warnings off (`_doctor/_quiet.py`), behind the script's own filters: its prediction must key
them too (attack 13b-03: predicted 1 miss where `--stabilize` makes 2)."""

import warnings

import equinox as eqx
import jax.numpy as jnp


@eqx.filter_jit
def step(x, act):
    return act(x)


x = jnp.ones(3)
for i in range(4):
    act = lambda v: v * 3.0  # noqa: E731 - rebuilt each iteration
    with warnings.catch_warnings():
        if i % 2:
            warnings.simplefilter("error")
        print(step(x, act))
