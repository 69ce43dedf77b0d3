"""Per-call dispatch cost of the stable `filter_jit` against raw `jax.jit` and `eqx.filter_jit`.

A loop of calls whose last result is blocked on (a training loop that logs now and then), and the
same with every result blocked on. Small MLP 32-64-64-64-32 on a (16, 32) batch, and a 200-layer
8-wide MLP. Raw `jax.jit` gets the parameters pre-partitioned (`eqx.partition`), the best a user
can do by hand. Also the cost of the per-call checks: the same stable wrapper with its entry's
`Watch` replaced by an empty one.

Every figure is the minimum over interleaved rounds (other processes only ever add time), and the
ratios compare figures taken in the same process, round by round: on a shared machine compare
ratios, not microseconds. `--count-calls` prints instead how many Python and C functions one
hit calls (`sys.setprofile`): a count that load does not change, to compare two versions of the
code on a busy machine; it also counts a step that returns its model (as a training step does).

Targets (issue 14): small <= 1.35x raw, pipelined and blocking on every call; 200-layer <= 1.15x
raw; small <= 0.25x `eqx.filter_jit`.
"""

import argparse
import gc
import sys

import equinox as eqx
import jax
import jax.random as jr
from _timing import header, per_call, table

import eqxstable as es
from eqxstable._jit._accounting import Call, current
from eqxstable._keys import Watch


_DEPTHS = {"small": (3, 64), "deep": (200, 8)}


def _vmapped(model, x):
    return jax.vmap(model)(x)


def _step(model, x):
    return model, _vmapped(model, x)


def _model(depth: int, width: int) -> tuple[eqx.nn.MLP, jax.Array]:
    return eqx.nn.MLP(32, 32, width, depth, key=jr.key(0)), jr.normal(jr.key(1), (16, 32))


def _setups(depth: int, width: int) -> tuple[dict, int, int]:
    mlp, x = _model(depth, width)
    params, static = eqx.partition(mlp, eqx.is_array)

    @jax.jit
    def raw(params, x):
        return _vmapped(eqx.combine(params, static), x)

    eqx_f = eqx.filter_jit(_vmapped)
    es_f = es.filter_jit(_vmapped)
    # A second stable wrapper (of another function, so it has its own entries) that checks no
    # `Watch`, neither its entries' nor its function's own: the difference is what they cost.
    es_nocheck = es.filter_jit(lambda model, x: _vmapped(model, x))
    es_nocheck(mlp, x)
    for entry in es_nocheck._program.cache.entries.values():
        entry.watch = Watch()
    es_nocheck._state.fun_watch = Watch()
    es_nocheck._state.watching = False
    es_f(mlp, x)
    watched = sum(len(e.watch) for e in es_f._program.cache.entries.values())
    watched += len(es_f._state.fun_watch)
    fns = {
        "raw jax.jit": lambda: raw(params, x),
        "eqx.filter_jit": lambda: eqx_f(mlp, x),
        "es.filter_jit": lambda: es_f(mlp, x),
        "es (no watch checks)": lambda: es_nocheck(mlp, x),
    }
    return fns, len(eqx.filter(jax.tree.leaves(mlp), eqx.is_array)), watched


def _breakdown(depth: int, width: int, calls: int, repeats: int) -> None:
    """Where a hit's time goes, each part timed alone in a tight loop (interleaved rounds)."""
    mlp, x = _model(depth, width)
    params, static = eqx.partition(mlp, eqx.is_array)
    flat_params, params_def = jax.tree.flatten(params)

    @jax.jit
    def raw(params, x):
        return _vmapped(eqx.combine(params, static), x)

    @jax.jit
    def raw_flat(flat_params, x):
        return _vmapped(eqx.combine(jax.tree.unflatten(params_def, flat_params), static), x)

    es_f = es.filter_jit(_vmapped)
    es_f(mlp, x)
    program, state = es_f._program, es_f._state
    args = ((mlp, x), {})
    flatten = jax.tree_util.default_registry.flatten
    leaves, treedef = flatten(args, None)
    entry = program.cache.lookup(leaves, treedef)
    donated, kept = entry.split(leaves)
    dynamic = es_f._dynamic
    # `take` (the hit path's split, which reuses the flat list) is newer than `split`.
    take = getattr(entry, "take", entry.split)
    same_data = entry.same_node_data

    def thread_local():
        previous = current.call
        current.call = None
        current.call = previous

    def without_gc():
        gc.disable()
        try:
            return es_f(mlp, x)
        finally:
            gc.enable()

    parts = {
        "raw jax.jit(params, x)": lambda: raw(params, x),
        "raw jax.jit on the flat params (JAX's dispatch)": lambda: raw_flat(flat_params, x),
        "program.jitted(donated, kept, dynamic, entry)": lambda: program.jitted(
            donated, kept, dynamic, entry
        ),
        "tree_flatten((args, kwargs))": lambda: flatten(args, None),
        "cache.lookup (types, treedef, statics, node data, watch)": lambda: program.cache.lookup(
            leaves, treedef
        ),
        "  of which node data read and compared by identity": lambda: same_data(treedef, leaves),
        "entry.take (statics out of the flat list)": lambda: take(list(leaves)),
        "list(leaves) (the copy the line above needs)": lambda: list(leaves),
        "state.refresh (the function's own watch)": state.refresh,
        "Call(...)": lambda: Call(program, es_f, args, {}, entry, False),
        "current.call get/set/restore": thread_local,
        "whole es.filter_jit call": lambda: es_f(mlp, x),
        "whole es.filter_jit call, gc disabled": without_gc,
    }
    times = per_call(parts, calls, repeats)
    rows = [[name, f"{t * 1e6:.2f}"] for name, t in times.items()]
    print(table(rows, [f"hit path, depth {depth} ({len(leaves)} leaves)", "us"]))


def _calls_per_hit(fn) -> int:
    """How many Python and C functions one call of `fn` (a hit, after two warm-up calls) calls."""
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    fn()
    fn()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def _count_calls() -> None:
    rows = []
    for name, (depth, width) in _DEPTHS.items():
        fns = _setups(depth, width)[0]
        counts = {label: _calls_per_hit(fn) for label, fn in fns.items()}
        raw = counts["raw jax.jit"]
        rows += [[name, label, str(n), f"{n / raw:.2f}x"] for label, n in counts.items()]
    print(table(rows, ["", "", "calls per hit", "vs raw"]))
    # A training step returns its model, whose activation functions are not arrays: JAX keeps
    # such a hit on its C++ fast path only if the output it flattens again is all arrays.
    rows = []
    for name, (depth, width) in _DEPTHS.items():
        mlp, x = _model(depth, width)
        eqx_step, es_step = eqx.filter_jit(_step), es.filter_jit(_step)
        counts = {
            "eqx.filter_jit": _calls_per_hit(lambda: eqx_step(mlp, x)),
            "es.filter_jit": _calls_per_hit(lambda: es_step(mlp, x)),
        }
        base = counts["eqx.filter_jit"]
        rows += [[name, label, str(n), f"{n / base:.2f}x"] for label, n in counts.items()]
    print(table(rows, ["step returning the model", "", "calls per hit", "vs eqx"]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--breakdown", action="store_true", help="also time each part of a hit")
    parser.add_argument(
        "--count-calls", action="store_true", help="count the functions a hit calls instead"
    )
    args = parser.parse_args()
    header("benchmarks/dispatch.py")
    if args.count_calls:
        _count_calls()
        return
    summary = []
    for name, (depth, width) in _DEPTHS.items():
        fns, n_leaves, watched = _setups(depth, width)
        calls = args.calls if depth < 10 else max(args.calls // 10, 20)
        pipelined = per_call(fns, calls, args.repeats)
        blocking = per_call(fns, calls, args.repeats, block_each=True)
        raw, raw_b, eqx_t = (
            pipelined["raw jax.jit"],
            blocking["raw jax.jit"],
            pipelined["eqx.filter_jit"],
        )
        rows = [
            [
                label,
                f"{pipelined[label] * 1e6:.1f}",
                f"{pipelined[label] / raw:.2f}x",
                f"{pipelined[label] / eqx_t:.2f}x",
                f"{blocking[label] * 1e6:.1f}",
                f"{blocking[label] / raw_b:.2f}x",
            ]
            for label in fns
        ]
        print(
            f"{name}: {depth}-layer MLP, width {width}, batch 16 ({n_leaves} arrays, "
            f"{watched} watched items)"
        )
        headers = ["", "us/call", "vs raw", "vs eqx", "us/call (block each)", "vs raw (block each)"]
        print(table(rows, headers))
        print()
        es_t, es_b = pipelined["es.filter_jit"], blocking["es.filter_jit"]
        if name == "small":
            summary.append(["small MLP vs raw jax.jit", f"{es_t / raw:.2f}x", "<= 1.35x"])
            summary.append(
                ["small MLP, blocking on every result", f"{es_b / raw_b:.2f}x", "<= 1.35x"]
            )
            summary.append(["small MLP vs eqx.filter_jit", f"{es_t / eqx_t:.2f}x", "<= 0.25x"])
            summary.append(
                [
                    "small MLP overhead over raw, us (pipelined / blocking)",
                    f"{(es_t - raw) * 1e6:.1f} / {(es_b - raw_b) * 1e6:.1f}",
                    "report only",
                ]
            )
        else:
            summary.append(["200-layer MLP vs raw jax.jit", f"{es_t / raw:.2f}x", "<= 1.15x"])
            summary.append(
                ["200-layer MLP, blocking on every result", f"{es_b / raw_b:.2f}x", "report only"]
            )
        if args.breakdown:
            _breakdown(depth, width, calls, args.repeats)
            print()
    print("issue 14 (the rebuild loop's row is benchmarks/rebuild.py)")
    print(table(summary, ["case", "es.filter_jit", "target"]))


if __name__ == "__main__":
    main()
