"""A loop that rebuilds its model every few steps, as a training script that recreates the model
(or its optimiser) from a config does: 12 rebuilds of an MLP with a lambda activation, 5 steps
each. Under `eqx.filter_jit` every rebuild recompiles (the new lambda is a new static); under
`es.filter_jit` the rebuilt lambda has the same stable key and the loop compiles once.

Target (issue 4): es >= 5x faster than eqx over the whole loop.

Then the same loop for a range of rebuild counts (`--curve`), whose total times are printed and,
when matplotlib is importable, plotted to `--plot` (default `docs/img/rebuild.png`; `--plot ""`
skips the curve).
"""

import argparse
import pathlib
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from _timing import count_compiles, header, pyplot, table

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


_ROOT = pathlib.Path(__file__).resolve().parent.parent
_JITS = {"eqx.filter_jit": eqx.filter_jit, "es.filter_jit": es.filter_jit}


def _best_loops(rebuilds: int, steps: int, repeats: int) -> dict[str, float]:
    """Best-of-`repeats` seconds of the whole loop under each jit, every run starting cold."""
    times: dict[str, list[float]] = {name: [] for name in _JITS}
    for _ in range(repeats):
        for name, jit in _JITS.items():
            es.clear_caches()
            times[name].append(_loop(jit, rebuilds, steps))
    return {name: min(seconds) for name, seconds in times.items()}


def _curve(counts: list[int], steps: int, repeats: int, plot: str) -> None:
    rows = []
    results: dict[str, list[float]] = {name: [] for name in _JITS}
    for rebuilds in counts:
        best = _best_loops(rebuilds, steps, repeats)
        for name in _JITS:
            results[name].append(best[name])
        ratio = best["eqx.filter_jit"] / best["es.filter_jit"]
        rows.append(
            [str(rebuilds), *(f"{best[name] * 1e3:.0f}" for name in _JITS), f"{ratio:.1f}x"]
        )
    print()
    print(f"total loop time vs rebuilds ({steps} steps each, best of {repeats})")
    print(table(rows, ["rebuilds", *(f"{name} ms" for name in _JITS), "eqx / es"]))
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in _JITS:
        ax.plot(counts, [t * 1e3 for t in results[name]], marker="o", label=name)
    ax.set_xlabel("rebuilds of the model")
    ax.set_ylabel(f"total ms ({steps} steps per rebuild)")
    ax.set_title("Training loop that rebuilds its model")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    pathlib.Path(plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=120)
    print(f"plot written to {plot}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rebuilds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--curve", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--plot", default=str(_ROOT / "docs" / "img" / "rebuild.png"))
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
    if args.plot:
        _curve(args.curve, args.steps, args.repeats, args.plot)


if __name__ == "__main__":
    main()
