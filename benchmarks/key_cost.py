"""What a key costs on the objects of issue 19: `diffrax.diffeqsolve` imported under jaxtyping's
import hook with beartype (as diffrax's own test suite runs) with `equinox.filter_jit` swapped
for eqxstable's, and a closure over a structure with shared parts (`node = [node, node]`).

    python benchmarks/key_cost.py

Needs diffrax and beartype. Each diffrax row runs in a fresh `python -m eqxstable doctor
--stabilize` process, so that the swap is in place before diffrax is imported.
"""

import os
import subprocess
import sys
import time


_CHILD = """
import sys, time
from jaxtyping import install_import_hook
if sys.argv[1] == "hook":
    with install_import_hook(["diffrax"], "beartype.beartype"):
        import diffrax
else:
    import diffrax
import jax.numpy as jnp
from eqxstable._keys import compute

start = time.perf_counter()
key, watch = compute(diffrax.diffeqsolve)
seconds = time.perf_counter() - start
term = diffrax.ODETerm(lambda t, y, args: -y)
hits = []
for y0 in (1.0, 2.0, 3.0):
    start = time.perf_counter()
    diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 1.0, 0.1, jnp.array(y0)).ys.block_until_ready()
    hits.append(time.perf_counter() - start)
print(seconds, len(watch), watch.valid(), hits[1], hits[2])
"""


def main() -> None:
    import tempfile

    print(f"# {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print("| object | key seconds | watched | watch valid after calls | hit 2, hit 3 (s) |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(_CHILD)
        for mode in ("plain", "hook"):
            out = subprocess.run(
                [sys.executable, "-m", "eqxstable", "doctor", "--stabilize", script, mode],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            ).stdout.split()
            seconds, watched, valid, hit2, hit3 = out[:5]
            label = "diffeqsolve" + (" (jaxtyping + beartype)" if mode == "hook" else "")
            print(
                f"| {label} | {float(seconds):.3f} | {watched} | {valid} | "
                f"{float(hit2):.4f}, {float(hit3):.4f} |"
            )

    from eqxstable._keys import compute

    node: list = []
    for _ in range(30):
        node = [node, node]
    f = lambda x: (x, node)  # noqa: E731
    start = time.perf_counter()
    _, watch = compute(f)
    print(
        f"| closure over `[node, node]` x30 | {time.perf_counter() - start:.4f} | {len(watch)} | "
        f"{watch.valid()} | - |"
    )


if __name__ == "__main__":
    main()
