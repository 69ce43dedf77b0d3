"""A loop that rebuilds its model every few steps, as a training script that recreates the model
(or its optimiser) from a config does: 12 rebuilds of an MLP with a lambda activation, 5 steps
each. Under `eqx.filter_jit` every rebuild recompiles (the new lambda is a new static); under
`es.filter_jit` the rebuilt lambda has the same stable key and the loop compiles once.

Target (issue 4): es >= 5x faster than eqx over the whole loop.
"""

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from _timing import count_compiles, header, table

import eqxstable as es


def _make_step():
    # A new function object per run, so that no run finds another's compiled programs (Equinox
    # caches by the function object; `es.clear_caches()` empties the stable side).
    def step(model, x):
        return jnp.mean(jax.vmap(model)(x) ** 2)

    return step


def _build(i: int) -> eqx.nn.MLP:
    return eqx.nn.MLP(32, 32, 64, 3, activation=lambda v: jnp.maximum(v, 0.1 * v), key=jr.key(i))


def _loop(jit, rebuilds: int, steps: int) -> float:
    step = jit(_make_step())
    x = jr.normal(jr.key(1), (16, 32))
    start = time.perf_counter()
    out = None
    for i in range(rebuilds):
        model = _build(i)
        for _ in range(steps):
            out = step(model, x)
    jax.block_until_ready(out)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rebuilds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    header("benchmarks/rebuild.py")
    results: dict[str, list[float]] = {"eqx.filter_jit": [], "es.filter_jit": []}
    misses = {}
    # Building a model runs eager JAX operations that compile once per process: do that first.
    jax.block_until_ready(_build(0)(jnp.ones(32)))
    for _ in range(args.repeats):
        for name, jit in (("eqx.filter_jit", eqx.filter_jit), ("es.filter_jit", es.filter_jit)):
            # Each run starts cold: a new function, a new wrapper, no compiled programs of it.
            es.clear_caches()
            with count_compiles() as compiles:
                seconds = _loop(jit, args.rebuilds, args.steps)
            results[name].append(seconds)
            misses[name] = compiles[0]
    best = {name: min(times) for name, times in results.items()}
    rows = [
        [
            name,
            f"{best[name] * 1e3:.0f}",
            str(misses[name]) if misses[name] >= 0 else "(not counted)",
        ]
        for name in results
    ]
    print(
        f"{args.rebuilds} rebuilds x {args.steps} steps, MLP 32-64-64-64-32, batch 16 "
        f"(best of {args.repeats})"
    )
    print(table(rows, ["", "loop ms", "XLA compilations"]))
    print(f"speed-up es over eqx: {best['eqx.filter_jit'] / best['es.filter_jit']:.1f}x")


if __name__ == "__main__":
    main()
