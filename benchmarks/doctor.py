"""What `eqxstable doctor` costs: wall time of `examples/sweep.py` with and without it, and the
time per cached call of an `eqx.filter_jit` function with and without its hooks.

Run: `python benchmarks/doctor.py [--repeats 3]`
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from _timing import header, table

from eqxstable._doctor import Observer


ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import sweep  # noqa: E402  # pyright: ignore[reportMissingImports]


def end_to_end(repeats: int) -> list[list[str]]:
    commands = {
        "python examples/sweep.py": [sys.executable, "examples/sweep.py"],
        "python -m eqxstable doctor examples/sweep.py": [
            sys.executable,
            "-m",
            "eqxstable",
            "doctor",
            "examples/sweep.py",
        ],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):  # interleaved, so that machine load hits both alike
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
            samples[name].append(time.perf_counter() - start)
    plain = statistics.median(samples["python examples/sweep.py"])
    return [
        [name, f"{statistics.median(s):.2f}", f"{statistics.median(s) / plain:.2f}x"]
        for name, s in samples.items()
    ]


def hit_path(calls: int, repeats: int) -> list[list[str]]:
    model = sweep.make_model(jr.key(0))
    optim = sweep.adam(1e-3)
    opt_state = optim.init(eqx.filter(model, eqx.is_array))
    x, y = sweep.make_data(jr.key(1))
    tiny = eqx.filter_jit(lambda a: a + 1)
    cases = {
        "tiny `x + 1`": lambda: tiny(jnp.ones(3)),
        "sweep `train_step`": lambda: sweep.train_step(model, opt_state, optim, x, y),
    }
    rows = []
    for name, fn in cases.items():
        jax.block_until_ready(fn())
        observer = Observer()
        observer.install()
        jax.block_until_ready(fn())  # the doctor's first sight of this function
        observer.uninstall()
        samples: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeats):
            for hooked in (False, True):
                if hooked:
                    observer.install()
                start = time.perf_counter()
                out = None
                for _ in range(calls):
                    out = fn()
                jax.block_until_ready(out)
                samples[hooked].append((time.perf_counter() - start) / calls)
                if hooked:
                    observer.uninstall()
        plain, hooked = (statistics.median(samples[k]) * 1e6 for k in (False, True))
        rows.append([name, f"{plain:.1f}", f"{hooked:.1f}", f"{hooked / plain:.2f}x"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    header("benchmarks/doctor.py")
    print("Wall time of the whole script (compiles included), median of interleaved runs:")
    print(table(end_to_end(args.repeats), ["command", "seconds", "ratio"]))
    print()
    print("Time per cached call (a hit), with and without the doctor's hooks:")
    rows = hit_path(calls=200, repeats=5 * args.repeats)
    print(table(rows, ["function", "plain us", "doctor us", "ratio"]))


if __name__ == "__main__":
    main()
