"""What a miss costs: the first call of a new function (trace + lower + compile + run) under
`es.filter_jit` against `eqx.filter_jit`, and the memory each cached program holds when one
function is compiled for many static configurations.

First call: a fresh function object per run (so that neither library, nor JAX's own caches, has
seen it), the small MLP 32-64-64-64-32 on a (16, 32) batch; interleaved runs, the minimum of each.
The trace, lowering and XLA compile seconds come from `jax.monitoring` events.

Memory: one function called with `--configs` different static integers, so that it compiles that
many programs; each library in a fresh subprocess (interleaved, best of `--repeats`), measuring the
growth of the process's resident memory and of the Python heap (`tracemalloc`) over the loop.

Targets (issue 14): first call within 1.05x of `eqx.filter_jit`; memory per cached program within
1.1x of Equinox over 500 static configurations.
"""

import argparse
import collections
import json
import subprocess
import sys
import time
import tracemalloc

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from _timing import header, table

import eqxstable as es


_JITS = {"eqx.filter_jit": eqx.filter_jit, "es.filter_jit": es.filter_jit}
_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
_seconds: collections.defaultdict[str, float] = collections.defaultdict(float)


def _on_event(event: str, duration_secs: float, **kwargs: str | int) -> None:
    name = _EVENTS.get(event)
    if name is not None:
        _seconds[name] += duration_secs


jax.monitoring.register_event_duration_secs_listener(_on_event)


def _make_step():
    # A new function object per run: nothing compiled for it exists yet, in either library.
    def step(model, x):
        return jnp.mean(jax.vmap(model)(x) ** 2)

    return step


def _first_call(jit, model, x) -> dict[str, float]:
    f = jit(_make_step())
    _seconds.clear()
    start = time.perf_counter()
    jax.block_until_ready(f(model, x))
    total = time.perf_counter() - start
    return {"total": total, **{name: _seconds[name] for name in _EVENTS.values()}}


def first_call(repeats: int) -> None:
    model = eqx.nn.MLP(32, 32, 64, 3, key=jr.key(0))
    x = jr.normal(jr.key(1), (16, 32))
    for jit in _JITS.values():  # JAX's own one-off work (eager ops, backend start-up)
        _first_call(jit, model, x)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in _JITS}
    for _ in range(repeats):
        for name, jit in _JITS.items():
            es.clear_caches()
            runs[name].append(_first_call(jit, model, x))
    parts = ["total", *_EVENTS.values()]
    best = {name: {p: min(r[p] for r in rs) for p in parts} for name, rs in runs.items()}
    rows = [[name, *(f"{best[name][p] * 1e3:.1f}" for p in parts)] for name in _JITS]
    eqx_t, es_t = best["eqx.filter_jit"]["total"], best["es.filter_jit"]["total"]
    rows.append(["es / eqx", *(_ratio(best, p) for p in parts)])
    print(f"first call of a new function, small MLP (min of {repeats} interleaved runs)")
    print(table(rows, ["", "total ms", "trace ms", "lower ms", "compile ms"]))
    print(f"first call, es / eqx: {es_t / eqx_t:.2f}x (target <= 1.05x)")
    print()


def _ratio(best: dict, part: str) -> str:
    eqx_t, es_t = best["eqx.filter_jit"][part], best["es.filter_jit"][part]
    return f"{es_t / eqx_t:.2f}x" if eqx_t else "-"


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _scaled(x, n):
    return x * n + jnp.sin(x)


def _memory_child(name: str, configs: int) -> None:
    """Compiles `configs` programs of one function and prints the memory they added (JSON)."""
    f = _JITS[name](_scaled)
    x = jnp.ones(16)
    jax.block_until_ready(f(x, -1))  # backend start-up and the first trace are not counted
    tracemalloc.start()
    heap0, rss0 = tracemalloc.get_traced_memory()[0], _rss()
    for n in range(configs):
        jax.block_until_ready(f(x, n))
    heap1, rss1 = tracemalloc.get_traced_memory()[0], _rss()
    print(json.dumps({"rss": rss1 - rss0, "heap": heap1 - heap0}))


def memory(configs: int, repeats: int) -> None:
    results: dict[str, list[dict[str, int]]] = {name: [] for name in _JITS}
    for _ in range(repeats):
        for name in _JITS:
            out = subprocess.run(
                [sys.executable, __file__, "--memory-child", name, "--configs", str(configs)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results[name].append(json.loads(out.strip().splitlines()[-1]))
    best = {
        name: {k: min(r[k] for r in rs) for k in ("rss", "heap")} for name, rs in results.items()
    }
    rows = [
        [
            name,
            f"{best[name]['rss'] / configs / 1024:.1f}",
            f"{best[name]['heap'] / configs / 1024:.1f}",
        ]
        for name in _JITS
    ]
    rows.append(["es / eqx", _ratio(best, "rss"), _ratio(best, "heap")])
    print(
        f"memory per cached program, {configs} static configurations of one function "
        f"(fresh process each, min of {repeats})"
    )
    print(table(rows, ["", "resident KiB", "Python heap KiB"]))
    es_t, eqx_t = best["es.filter_jit"]["rss"], best["eqx.filter_jit"]["rss"]
    print(f"memory per program, es / eqx: {es_t / eqx_t:.2f}x (target <= 1.1x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--configs", type=int, default=500)
    parser.add_argument("--memory-repeats", type=int, default=2)
    parser.add_argument("--memory-child", choices=list(_JITS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        _memory_child(args.memory_child, args.configs)
        return
    header("benchmarks/first_call.py")
    first_call(args.repeats)
    memory(args.configs, args.memory_repeats)


if __name__ == "__main__":
    main()
