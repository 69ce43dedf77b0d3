"""What a key costs on the objects of issue 19: `diffrax.diffeqsolve` imported under jaxtyping's
import hook with beartype (as diffrax's own test suite runs) with `equinox.filter_jit` swapped
for eqxstable's, and a closure over a structure with shared parts (`node = [node, node]`).

    python benchmarks/key_cost.py          # all rows
    python benchmarks/key_cost.py --big    # the big-structure rows only (attack 5: 06, 09, 14)

The big-structure rows time a hit of `equinox.filter_jit` and of `eqxstable.filter_jit` on the
same function, interleaved, the minimum over rounds. Needs diffrax and beartype for the others.
Each diffrax row runs in a fresh `python -m eqxstable doctor
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


def _big_cases() -> list:
    import equinox as eqx
    import numpy as np

    import eqxstable as es

    class Record:
        def __init__(self, v: int):
            self.v = v
            self.w = [v, v + 1]

    class Tok(es.StableModule):
        vocab: tuple = eqx.field(static=True)

        def __call__(self, x):
            return x * len(self.vocab)

    big_list = [0] * 2_000_000
    big_dict = {f"k{i}": i for i in range(100_000)}
    big_array = np.zeros(10_000_000)
    records = [Record(i) for i in range(12_000)]
    pairs = tuple((f"w{i}", i) for i in range(60_000))
    pair_list = [(i, str(i)) for i in range(60_000)]
    tok = Tok(tuple(f"w{i}" for i in range(100_000)))
    return [
        ("closure over a 2M-item list (06)", lambda: lambda x: x + big_list[0], ()),
        ("closure over a 100k-entry dict (06)", lambda: lambda x: x + big_dict["k0"], ()),
        ("closure over an 80 MB ndarray (06)", lambda: lambda x: x + big_array[0], ()),
        ("closure over 12k user objects (09)", lambda: lambda x: x + records[0].v, ()),
        ("closure over 60k frozen pairs (budget)", lambda: lambda x: x + len(pairs), ()),
        (
            "closure over a list of 60k pairs (attack 6: 06)",
            lambda: lambda x: x * len(pair_list),
            (),
        ),
        ("StableModule, 100k-word static vocab (14)", lambda: lambda m, x: m(x), (tok,)),
    ]


def big_structures(rounds: int = 5) -> None:
    import equinox as eqx
    import jax.numpy as jnp

    import eqxstable as es

    print(
        "| big structure | equinox first call (s) | eqxstable first call (s) | "
        "equinox hit (ms) | eqxstable hit (ms) |"
    )
    print("| --- | --- | --- | --- | --- |")
    x = jnp.float32(1.0)
    for label, make, args in _big_cases():
        first = {}
        hit: dict = {"eqx": [], "es": []}
        jitted = {}
        for name, jit in (("eqx", eqx.filter_jit), ("es", es.filter_jit)):
            jitted[name] = jit(make())
            start = time.perf_counter()
            jitted[name](*args, x).block_until_ready()
            first[name] = time.perf_counter() - start
        for _ in range(rounds):
            for name in ("eqx", "es"):
                start = time.perf_counter()
                jitted[name](*args, x).block_until_ready()
                hit[name].append(time.perf_counter() - start)
        print(
            f"| {label} | {first['eqx']:.3f} | {first['es']:.3f} | "
            f"{1e3 * min(hit['eqx']):.3f} | {1e3 * min(hit['es']):.3f} |"
        )


def main() -> None:
    import tempfile

    if "--big" in sys.argv:
        print(f"# {' '.join([os.path.basename(sys.executable), *sys.argv])}")
        big_structures()
        return

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
    print()
    big_structures()


if __name__ == "__main__":
    main()
