"""Shared timing helpers for the benchmark scripts: interleaved repeats, minima, a header."""

import contextlib
import platform
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import equinox as eqx
import jax


def header(script: str) -> None:
    """Prints the command and the versions, so that every table says how it was made."""
    print(f"$ python {script} {' '.join(sys.argv[1:])}".rstrip())
    print(
        f"Python {platform.python_version()}, JAX {jax.__version__}, Equinox {eqx.__version__}, "
        f"device {jax.devices()[0].device_kind}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print()


_compiles = [0]


def _on_event(event: str, duration_secs: float, **kwargs: str | int) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _compiles[0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_event)


@contextlib.contextmanager
def count_compiles() -> Iterator[list[int]]:
    """Counts XLA compilations inside the block (all programs, as JAX reports them)."""
    result = [0]
    start = _compiles[0]
    try:
        yield result
    finally:
        result[0] = _compiles[0] - start


def _block(out: Any) -> None:
    # Only the arrays: what a timed part returns may hold other things (a treedef, a function).
    jax.block_until_ready([x for x in jax.tree.leaves(out) if isinstance(x, jax.Array)])


def per_call(
    fns: dict[str, Callable[[], object]],
    calls: int,
    repeats: int,
    block_each: bool = False,
) -> dict[str, float]:
    """Seconds per call of each `fn` (the best of the repeats), measured in interleaved repeats
    of `calls` calls whose last result (or, with `block_each`, every result) is blocked on."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # compile and warm up
        for _ in range(3):
            _block(fn())
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            if block_each:
                for _ in range(calls):
                    jax.block_until_ready(fn())
            else:
                out = None
                for _ in range(calls):
                    out = fn()
                _block(out)
            samples[name].append((time.perf_counter() - start) / calls)
    # The minimum over repeats: on a shared machine other processes only ever add time.
    return {name: min(s) for name, s in samples.items()}


def table(rows: list[list[str]], header_row: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header_row, *rows]) for i in range(len(header_row))]

    def fmt(row: list[str]) -> str:
        cells = (c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        return "  ".join(cells)

    return "\n".join([fmt(header_row), "  ".join("-" * w for w in widths), *map(fmt, rows)])


def pyplot() -> Any:
    """`matplotlib.pyplot` with a file backend, or `None` (after saying so) if matplotlib is not
    installed: plots are optional, tables are not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not importable (pip install -e ".[bench]"): no plot.')
        return None
    return plt
