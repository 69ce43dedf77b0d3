"""The cost of a miss whose program is already compiled (issue 20), against an Equinox miss.

A training step is rebuilt for each trial of a sweep, closing over a fresh config dict (which
only identity can key), as a new user writes it: every trial is a miss under both jits. Under
`eqx.filter_jit` each miss traces, lowers and compiles; under `es.filter_jit` it traces,
fingerprints what the trace produced, and runs the program compiled for the first trial.

Interleaved rounds (one Equinox miss, then one stable miss), minimum of the rounds, on the small
MLP step of `dispatch.py` (32-64-64-64-32, batch 16), on a 50-layer MLP (width 32, unrolled: an
`eqx.nn.MLP` of depth 50), and on the same 50 layers written the idiomatic Equinox way for deep
models: the layers stacked (`eqx.filter_vmap` over their keys) and applied by `lax.scan`. The
whole miss (the first call, blocked on), and its parts from `jax.monitoring` (trace, lowering, XLA
compile) and the fingerprint. Targets: the stable miss at most 0.15 of Equinox's (small) and
0.10 (deep).
"""

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from _timing import count_compiles, header, table

import eqxstable as es
from eqxstable._jit import _reuse


_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowering",
    "/jax/core/compile/backend_compile_duration": "compile",
}
_seconds = {"trace": 0.0, "lowering": 0.0, "compile": 0.0}


def _on_event(event: str, duration_secs: float, **kwargs: str | int) -> None:
    name = _EVENTS.get(event)
    if name is not None:
        _seconds[name] += duration_secs


jax.monitoring.register_event_duration_secs_listener(_on_event)


def _make_step(config: dict):
    # A new function per trial, closing over a fresh dict: a miss under both jits.
    def step(model, x):
        def loss(model):
            return jnp.mean(jax.vmap(model)(x) ** 2)

        value, grads = eqx.filter_value_and_grad(loss)(model)
        updates = jax.tree.map(lambda g: -config["lr"] * g, grads)
        return eqx.apply_updates(model, updates), value

    return step


def _miss(jit, model, x) -> dict[str, float]:
    """One miss, blocked on: its wall time and its parts."""
    step = jit(_make_step({"lr": 0.1}))
    params, static = eqx.partition(model, eqx.is_array)
    before = dict(_seconds)
    before_reuse = dict(_reuse.timings)
    start = time.perf_counter()
    out = step(eqx.combine(params, static), x)
    jax.block_until_ready(out)
    total = time.perf_counter() - start
    parts = {name: _seconds[name] - before[name] for name in _seconds}
    parts["fingerprint"] = _reuse.timings["fingerprint"] - before_reuse["fingerprint"]
    parts["total"] = total
    return parts


class ScanMLP(eqx.Module):
    """`depth` layers of width 32 with ReLU, stacked and applied by `lax.scan`: one layer is
    traced and compiled, whatever the depth."""

    layers: eqx.nn.Linear

    def __init__(self, depth: int, width: int, key: jax.Array):
        make = lambda k: eqx.nn.Linear(width, width, key=k)  # noqa: E731
        self.layers = eqx.filter_vmap(make)(jr.split(key, depth))

    def __call__(self, x: jax.Array) -> jax.Array:
        params, static = eqx.partition(self.layers, eqx.is_array)

        def layer(x, params):
            return jax.nn.relu(eqx.combine(params, static)(x)), None

        return jax.lax.scan(layer, x, params)[0]


def _measure(model: eqx.Module, rounds: int) -> dict[str, dict[str, float]]:
    x = jr.normal(jr.key(1), (16, 32))
    es.clear_caches()
    _miss(es.filter_jit, model, x)  # The program every later stable miss finds.
    best: dict[str, dict[str, float]] = {}
    for _ in range(rounds):
        for name, jit in (("eqx.filter_jit", eqx.filter_jit), ("es.filter_jit", es.filter_jit)):
            with count_compiles() as compiles:
                parts = _miss(jit, model, x)
            parts["compiles"] = compiles[0]
            if name not in best or parts["total"] < best[name]["total"]:
                best[name] = parts
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", nargs="*", help="the cases to run (small, deep, deep-scan)")
    args = parser.parse_args()
    header("benchmarks/miss_cost.py")
    summary = []
    cases = (
        ("small", "3-layer MLP, width 64", lambda: eqx.nn.MLP(32, 32, 64, 3, key=jr.key(0)), 0.15),
        ("deep", "50-layer MLP, width 32", lambda: eqx.nn.MLP(32, 32, 32, 50, key=jr.key(0)), 0.10),
        ("deep-scan", "50 layers by lax.scan, width 32", lambda: ScanMLP(50, 32, jr.key(0)), 0.10),
    )
    for label, model_name, make_model, target in cases:
        if args.only and label not in args.only:
            continue
        best = _measure(make_model(), args.rounds)
        rows = []
        for name, parts in best.items():
            rows.append(
                [
                    name,
                    *(f"{1e3 * parts[k]:.1f}" for k in ("trace", "fingerprint", "lowering")),
                    f"{1e3 * parts['compile']:.1f}",
                    f"{1e3 * parts['total']:.1f}",
                    str(parts["compiles"]),
                ]
            )
        columns = ["trace ms", "fingerprint ms", "lowering ms", "compile ms", "miss ms"]
        print(table(rows, [f"{label}: {model_name}", *columns, "compiles"]))
        print()
        ratio = best["es.filter_jit"]["total"] / best["eqx.filter_jit"]["total"]
        summary.append([f"{label}: stable / Equinox miss", f"{ratio:.3f}"])
        summary[-1].append(f"<= {target}")
    print(table(summary, ["miss cost", "ratio", "target"]))


if __name__ == "__main__":
    main()
