"""The interning registry: `intern` of an already-seen object, and keys of fresh objects.

Target (issue 2): `intern` of an already-seen object <= 3 us median. The cost of keying a
fresh typical closure (an MLP activation, an optax optimizer) is reported.
"""

import functools as ft
import statistics
import time
from collections.abc import Callable

import jax
import optax

import eqxstable as es
from eqxstable._keys import compute


try:
    from _timing import header, table
except ImportError:  # run as `python -m benchmarks.registry`
    from benchmarks._timing import header, table


def make_activation(alpha=0.1):
    return lambda x: jax.nn.leaky_relu(x, alpha)


def median_us(fn: Callable[[], object], number: int, repeats: int = 15) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e6


def main() -> None:
    header("benchmarks/registry.py")
    seen_activation = es.intern(make_activation())
    seen_partial = es.intern(ft.partial(jax.nn.leaky_relu, negative_slope=0.1))
    seen_jit = es.intern(jax.jit(jax.numpy.sin))
    seen_adam = es.intern(optax.adam(1e-3))
    fresh_activations = [make_activation() for _ in range(40_000)]
    fresh_adams = [optax.adam(1e-3) for _ in range(3_500)]
    it_act, it_adam = iter(fresh_activations), iter(fresh_adams)

    rows = [
        ["intern(seen lambda)", median_us(lambda: es.intern(seen_activation), 20_000)],
        ["intern(seen partial)", median_us(lambda: es.intern(seen_partial), 20_000)],
        ["intern(seen jax.jit(jnp.sin))", median_us(lambda: es.intern(seen_jit), 20_000)],
        ["intern(seen optax.adam) (no memo)", median_us(lambda: es.intern(seen_adam), 500)],
        ["stable_key(seen lambda)", median_us(lambda: es.stable_key(seen_activation), 20_000)],
        ["key of a fresh lambda activation", median_us(lambda: compute(next(it_act)), 1_000)],
        ["intern(fresh equivalent lambda)", median_us(lambda: es.intern(next(it_act)), 1_000)],
        ["key of a fresh optax.adam(1e-3)", median_us(lambda: compute(next(it_adam)), 100)],
        ["intern(fresh optax.adam(1e-3))", median_us(lambda: es.intern(next(it_adam)), 100)],
    ]
    print(table([[name, f"{us:.2f}"] for name, us in rows], ["operation", "median us"]))
    print()
    print("target: intern of an already-seen object <= 3 us median")


if __name__ == "__main__":
    main()
