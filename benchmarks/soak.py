"""A soak run: 20,000 calls of a jitted step that mix what a long sweep or a service does, and the
resident memory (RSS) of the process along the way, `es.filter_jit` against `eqx.filter_jit`,
each in a fresh process of its own.

Each call is one of, in turn:

- a **rebuilt module**: a new `Model` (weights and a library activation) built from its config;
- a **fresh wrapper**: `jit(step)` made again for the call (as inline code does);
- **fresh node data**: a custom pytree node whose aux data is a new (equal) dataclass each call;
- every 50th call, a **fresh identity-keyed static**: a new wrapper of a new closure over a new
  NumPy array (8 KiB), dropped after the call: it compiles, in both libraries.

RSS is read every 1,000 calls. The figure of merit is the growth after warm-up (the first 4,000
calls): flat means within the bound printed (`--bound`, MiB), which leaves room for the 320
programs the identity-keyed calls compile on purpose (JAX keeps its own compiled programs in
LRUs of 4096/8192; neither library can free them sooner).

    python benchmarks/soak.py            # both libraries, one subprocess each
    python benchmarks/soak.py --calls 4000
"""

import argparse
import dataclasses
import gc
import json
import subprocess
import sys
import time
from typing import Any


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _run(library: str, calls: int, every: int) -> dict:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    import eqxstable as es

    jit = es.filter_jit if library == "eqxstable" else eqx.filter_jit

    class Model(eqx.Module):
        weight: jax.Array
        activation: Any = eqx.field(static=True)

        def __call__(self, x):
            return self.activation(self.weight * x)

    @dataclasses.dataclass
    class Meta:
        name: str
        scale: float

    class Node:
        def __init__(self, x, meta):
            self.x = x
            self.meta = meta

    jax.tree_util.register_pytree_node(
        Node, lambda n: ((n.x,), n.meta), lambda meta, children: Node(children[0], meta)
    )

    def step(model, x):
        return jnp.sum(model(x))

    def node_step(node):
        return jnp.sum(node.x) * node.meta.scale

    def closure_over(array):
        def f(x):
            return x + array.sum()

        return f

    stepped = jit(step)
    node_stepped = jit(node_step)
    x = jnp.ones(8)
    samples = []
    traces_before = time.perf_counter()
    for i in range(calls):
        kind = i % 3
        if i % every == every - 1:
            jit(closure_over(np.full(1024, float(i))))(x).block_until_ready()
        elif kind == 0:
            stepped(Model(jnp.full(8, 0.5), jax.nn.relu), x).block_until_ready()
        elif kind == 1:
            jit(step)(Model(jnp.ones(8), jax.nn.relu), x).block_until_ready()
        else:
            node_stepped(Node(x, Meta("a", 2.0))).block_until_ready()
        if (i + 1) % 1000 == 0:
            gc.collect()
            samples.append((i + 1, round(_rss_mib(), 1)))
    return {
        "library": library,
        "samples": samples,
        "seconds": round(time.perf_counter() - traces_before, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="A soak run of es.filter_jit vs eqx.filter_jit.")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=4_000)
    parser.add_argument("--bound", type=float, default=40.0)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_run(args.child, args.calls, args.every)))
        return
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from _timing import header

    header("benchmarks/soak.py")
    results = []
    for library in ("eqxstable", "equinox"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", library, "--calls", str(args.calls)]
            + ["--every", str(args.every)],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'calls':>7} " + " ".join(f"{r['library']:>10}" for r in results) + "   (RSS, MiB)")
    for row in zip(*(r["samples"] for r in results)):
        print(f"{row[0][0]:>7} " + " ".join(f"{rss:>10.1f}" for _, rss in row))
    print()
    for r in results:
        after = [rss for n, rss in r["samples"] if n >= args.warmup]
        growth = after[-1] - after[0] if after else float("nan")
        peak = max(after) - after[0] if after else float("nan")
        verdict = "flat" if peak <= args.bound else "GROWS"
        print(
            f"{r['library']}: {r['seconds']} s; after {args.warmup} calls RSS grew "
            f"{growth:+.1f} MiB (peak {peak:+.1f}); bound {args.bound:.0f} MiB: {verdict}"
        )


if __name__ == "__main__":
    main()
