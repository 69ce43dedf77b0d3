"""`es.report()`: one table over every live stable `filter_jit`."""

from collections import Counter

import jax

from ._accounting import live_wrappers, Miss


_HEADER = ("function", "calls", "hits", "misses", "compiles", "compile s", "most common miss")
_MAX_REASON = 90


def _top_reason(misses: list[Miss]) -> str:
    # The first call always misses; the interesting misses are the ones after it.
    later = [m for m in misses if m.kind != "first"]
    if not later:
        return "-"
    (kind, path), count = Counter((m.kind, m.path) for m in later).most_common(1)[0]
    reason = next(m.reason for m in later if (m.kind, m.path) == (kind, path))
    text = f"{kind} at `{path}` (x{count}): {reason}" if path else f"{kind} (x{count}): {reason}"
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."


def _process_line() -> str | None:
    # Under `jax.distributed` every process keeps its own wrappers and counters, and logs from
    # several processes end up side by side, so a report says whose counts it holds.
    count = jax.process_count()
    if count == 1:
        return None
    index = jax.process_index()
    return (
        f"process {index} of {count} (`jax.process_index()` is {index}): the counts below are "
        "this process's own."
    )


def report() -> str:
    """A table over every live stable [`eqxstable.filter_jit`][]: its name, calls, hits, misses,
    compiles (a miss whose trace produced a program already compiled reuses it, and one that JAX
    loaded from its persistent compilation cache compiled nothing either), compile seconds
    and the most common reason it recompiled. In a multi-process run (`jax.distributed`) its
    first line names the process it describes.

    **Arguments:** None.

    **Returns:**

    The table as a string (print it).

    !!! example

        ```python
        import jax.numpy as jnp
        import eqxstable as es

        @es.filter_jit
        def double(x):
            return 2 * x

        for n in (2, 2, 3):
            double(jnp.ones(n))
        print(es.report())  # `double`: 3 calls, 1 hit, 2 misses, a shape change
        ```
    """
    rows = []
    for wrapper in sorted(live_wrappers, key=lambda w: w.name):
        info = wrapper.cache_info()
        rows.append(
            (
                wrapper.name,
                str(info.hits + info.misses),
                str(info.hits),
                str(info.misses),
                str(info.compiles),
                f"{info.compile_seconds:.3f}",
                _top_reason(wrapper._stats.misses),
            )
        )
    process = _process_line()
    head = [] if process is None else [process]
    if not rows:
        return "\n".join([*head, "No stable `filter_jit` functions are alive."])
    widths = [max(len(row[i]) for row in [_HEADER, *rows]) for i in range(len(_HEADER))]

    def line(row):
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:6], widths[1:6])]
        cells.append(row[6])
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths[:6]) + "  " + "-" * len(_HEADER[6])
    return "\n".join([*head, line(_HEADER), rule, *map(line, rows)])
