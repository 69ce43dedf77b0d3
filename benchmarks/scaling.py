"""How the per-call cost grows with the number of leaves (10 to 10,000): raw `jax.jit`,
`eqx.filter_jit` and `es.filter_jit` on the same function, called with a list of small arrays and
a few static values, in a loop whose last result is blocked on.

Prints a table (microseconds per call and per leaf) and, when matplotlib is importable, writes a
log-log plot to `--plot` (default `docs/img/scaling.png`).
"""

import argparse
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
from _timing import header, per_call, pyplot, table

import eqxstable as es


def _first_plus_one(leaves, config):
    return leaves[0] + config[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--plot",
        default=str(pathlib.Path(__file__).resolve().parent.parent / "docs/img/scaling.png"),
    )
    args = parser.parse_args()
    header("benchmarks/scaling.py")
    names = ["raw jax.jit", "eqx.filter_jit", "es.filter_jit"]
    results: dict[str, list[float]] = {name: [] for name in names}
    rows = []
    for n in args.sizes:
        leaves = [jnp.full((2,), float(i)) for i in range(n)]
        config = (1, "static", 2.0)
        raw = jax.jit(_first_plus_one, static_argnums=1)
        eqx_f = eqx.filter_jit(_first_plus_one)
        es_f = es.filter_jit(_first_plus_one)
        fns = {
            "raw jax.jit": lambda: raw(leaves, config),
            "eqx.filter_jit": lambda: eqx_f(leaves, config),
            "es.filter_jit": lambda: es_f(leaves, config),
        }
        calls = max(10, 20_000 // n)
        times = per_call(fns, calls, args.repeats)
        for name in names:
            results[name].append(times[name])
        row = [str(n)]
        for name in names:
            row += [f"{times[name] * 1e6:.1f}", f"{times[name] * 1e6 / n:.3f}"]
        row.append(f"{times['es.filter_jit'] / times['raw jax.jit']:.2f}x")
        rows.append(row)
    head = ["leaves"]
    for name in names:
        head += [f"{name} us", "us/leaf"]
    head.append("es / raw")
    print(table(rows, head))
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in names:
        ax.loglog(args.sizes, [t * 1e6 for t in results[name]], marker="o", label=name)
    ax.set_xlabel("leaves")
    ax.set_ylabel("us per call")
    ax.set_title("Per-call cost vs number of leaves")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
