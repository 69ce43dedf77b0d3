"""The cost of `StableModule` construction and of `stabilize`, side by side with plain Equinox.

Target (issue 3): constructing a `StableModule` of 20 `eqx.nn.Linear` layers costs <= 1.5x the
same `eqx.Module` (warm registry). Also reported: the same with the layers built beforehand (so
that only the walk is left to measure), and `es.stabilize` on an already-stable tree next to
`jax.tree_util.tree_flatten` of the same tree.
"""

import gc
import statistics
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.random as jr

import eqxstable as es


try:
    from _timing import header, table
except ImportError:  # run as `python -m benchmarks.construction`
    from benchmarks._timing import header, table


_LAYERS = 20
_WIDTH = 16


def _layers(key):
    return [eqx.nn.Linear(_WIDTH, _WIDTH, key=k) for k in jr.split(key, _LAYERS)]


class PlainNet(eqx.Module):
    layers: list
    activation: Callable

    def __init__(self, key):
        self.layers = _layers(key)
        self.activation = lambda x: jax.nn.leaky_relu(x, 0.1)


class StableNet(es.StableModule):
    layers: list
    activation: Callable

    def __init__(self, key):
        self.layers = _layers(key)
        self.activation = lambda x: jax.nn.leaky_relu(x, 0.1)


class PlainWrap(eqx.Module):
    layers: list
    activation: Callable


class StableWrap(es.StableModule):
    layers: list
    activation: Callable


def median_us(fns: dict[str, Callable[[], object]], number: int, repeats: int = 9) -> dict:
    """Median microseconds per call, the functions interleaved so that drift hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # Warm: the registry has seen every callable, JAX has compiled every op.
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            samples[name].append((time.perf_counter() - start) / number)
    return {name: statistics.median(s) * 1e6 for name, s in samples.items()}


def main() -> None:
    header("benchmarks/construction.py")
    key = jr.key(0)
    prebuilt = PlainNet(key).layers
    stable = StableNet(key)

    def act(x):
        return jax.nn.leaky_relu(x, 0.1)

    def copies(tree, n):
        # Fresh node objects with the same leaves, as `tree_unflatten` makes them: the registry
        # is warm but nothing is known to be stable yet, so the whole walk is measured.
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        out = [jax.tree_util.tree_unflatten(treedef, leaves) for _ in range(n)]
        # Out of the garbage collector's sight, so that its passes over these thousands of
        # copies are not timed as if they were part of one construction.
        gc.collect()
        gc.freeze()
        return iter(out)

    rows = []
    build = median_us({"plain": lambda: PlainNet(key), "stable": lambda: StableNet(key)}, 5)
    rows.append(["20 Linear layers built in __init__", build["plain"], build["stable"]])
    n = 200
    fresh_plain, fresh_stable = copies(prebuilt, 10 * n), copies(prebuilt, 10 * n)
    wrap = median_us(
        {
            "plain": lambda: PlainWrap(next(fresh_plain), act),
            "stable": lambda: StableWrap(next(fresh_stable), act),
        },
        n,
    )
    rows.append(["20 prebuilt Linear layers passed in", wrap["plain"], wrap["stable"]])
    flat = jax.tree_util.tree_flatten
    fresh_copies = copies(stable, 10 * n)
    walk = median_us(
        {"plain": lambda: flat(stable), "stable": lambda: es.stabilize(next(fresh_copies))}, n
    )
    rows.append(["tree_flatten vs stabilize(copy of stable tree)", walk["plain"], walk["stable"]])
    again = median_us({"plain": lambda: flat(stable), "stable": lambda: es.stabilize(stable)}, n)
    rows.append(["tree_flatten vs stabilize(stabilized tree)", again["plain"], again["stable"]])
    print(
        table(
            [[name, f"{p:.1f}", f"{s:.1f}", f"{s / p:.2f}x"] for name, p, s in rows],
            ["operation", "eqx.Module us", "eqxstable us", "ratio"],
        )
    )


if __name__ == "__main__":
    main()
