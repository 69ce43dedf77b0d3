"""A step rebuilt for each trial as a closure over a fresh, equal dict: a dict can change, so
neither Equinox nor eqxstable shares a cache entry between two of them (each trial traces), but
eqxstable runs the program compiled for the first trial (one compile). A changed value is
another program: it compiles again, with the right answer."""

import equinox as eqx
import jax.numpy as jnp


def make_step(config):
    @eqx.filter_jit
    def step(x):
        return x * config["scale"] + config["shift"], config["name"]

    return step


x = jnp.arange(3.0)
for trial in range(5):
    config = {"scale": 2.0, "shift": 1.0, "name": "linear"}
    y, name = make_step(config)(x)
    print(trial, name, y)
y, name = make_step({"scale": 3.0, "shift": 1.0, "name": "linear"})(x)
print("changed", name, y)
