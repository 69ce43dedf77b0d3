"""Per-call dispatch cost of the stable `filter_jit` against raw `jax.jit` and `eqx.filter_jit`.

A loop of calls whose last result is blocked on (a training loop that logs now and then), and the
same with every result blocked on. Small MLP 32-64-64-64-32 with batch 16, and a 200-layer MLP.
Raw `jax.jit` gets the parameters pre-partitioned (`eqx.partition`), the best a user can do by
hand. Also the cost of mutation detection: the same stable wrapper with its snapshots removed.

Targets (issue 4): es <= 1.5x raw (small), <= 1.25x raw (deep), <= 0.4x eqx (small).
"""

import argparse

import equinox as eqx
import jax
import jax.random as jr
from _timing import header, per_call, table

import eqxstable as es


def _forward(model, x):
    return model(x)


def _vmapped(model, x):
    return jax.vmap(model)(x)


def _setups(depth: int):
    mlp = eqx.nn.MLP(32, 32, 64, depth, key=jr.key(0))
    x = jr.normal(jr.key(1), (16, 32))
    params, static = eqx.partition(mlp, eqx.is_array)

    @jax.jit
    def raw(params, x):
        return _vmapped(eqx.combine(params, static), x)

    eqx_f = eqx.filter_jit(_vmapped)
    es_f = es.filter_jit(_vmapped)
    # A second stable wrapper (of another function, so it has its own entries) whose entries
    # skip mutation detection: the difference is what the per-call checks cost.
    es_nocheck = es.filter_jit(lambda model, x: _vmapped(model, x))
    es_nocheck(mlp, x)
    for entry in es_nocheck._program.cache.entries.values():
        entry.snapshots = ()
    es_f(mlp, x)
    n_snapshots = sum(len(e.snapshots) for e in es_f._program.cache.entries.values())
    return (
        {
            "raw jax.jit": lambda: raw(params, x),
            "eqx.filter_jit": lambda: eqx_f(mlp, x),
            "es.filter_jit": lambda: es_f(mlp, x),
            "es (no mutation check)": lambda: es_nocheck(mlp, x),
        },
        len(jax.tree.leaves(mlp)),
        n_snapshots,
    )


def _breakdown(depth: int) -> None:
    """Where the stable wrapper's time goes on a hit, each part timed alone in a tight loop."""
    mlp = eqx.nn.MLP(32, 32, 64, depth, key=jr.key(0))
    x = jr.normal(jr.key(1), (16, 32))
    es_f = es.filter_jit(_forward_vmapped)
    es_f(mlp, x)
    program = es_f._program
    args = ((mlp, x), {})
    leaves, treedef = jax.tree.flatten(args)
    entry = program.cache.lookup(leaves, treedef)
    donated, kept = entry.split(leaves)
    snapshots = entry.snapshots
    parts = {
        "tree_flatten((args, kwargs))": lambda: jax.tree.flatten(args),
        "cache lookup, with mutation checks": lambda: program.cache.lookup(leaves, treedef),
        "jax.jit call on the flat leaves": lambda: program.jitted(donated, kept, [], entry),
        "whole es.filter_jit call": lambda: es_f(mlp, x),
    }
    times = per_call(parts, 200, 9)
    entry.snapshots = ()
    times["cache lookup, no mutation checks"] = per_call(
        {"": lambda: program.cache.lookup(leaves, treedef)}, 200, 9
    )[""]
    entry.snapshots = snapshots
    rows = [[name, f"{t * 1e6:.1f}"] for name, t in times.items()]
    print(table(rows, [f"hit path, depth {depth}", "us"]))


def _forward_vmapped(model, x):
    return jax.vmap(model)(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    header("benchmarks/dispatch.py")
    for name, depth in (("small 32-64-64-64-32", 3), ("deep 200-layer", 200)):
        fns, n_leaves, n_snaps = _setups(depth)
        calls = args.calls if depth < 10 else max(args.calls // 5, 20)
        rows = []
        results = {}
        for block_each in (False, True):
            results[block_each] = per_call(fns, calls, args.repeats, block_each)
        raw = results[False]["raw jax.jit"]
        raw_b = results[True]["raw jax.jit"]
        eqx_t = results[False]["eqx.filter_jit"]
        for label in fns:
            t, tb = results[False][label], results[True][label]
            rows.append(
                [
                    label,
                    f"{t * 1e6:.1f}",
                    f"{t / raw:.2f}x",
                    f"{t / eqx_t:.2f}x",
                    f"{tb * 1e6:.1f}",
                    f"{tb / raw_b:.2f}x",
                ]
            )
        print(f"{name} MLP, batch 16 ({n_leaves} array leaves, {n_snaps} mutation snapshots)")
        print(
            table(
                rows,
                ["", "us/call", "vs raw", "vs eqx", "us/call (block each)", "vs raw (block each)"],
            )
        )
        mut = results[False]["es.filter_jit"] - results[False]["es (no mutation check)"]
        print(f"mutation detection: {mut * 1e6:+.1f} us/call")
        print()
        _breakdown(depth)
        print()


if __name__ == "__main__":
    main()
