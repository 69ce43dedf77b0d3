"""JAX's configuration that a trace reads but JAX leaves out of its own cache key.

JAX keys its caches by its trace context (`jax._src.config.trace_context()`: x64, matmul
precision, dtype and rank promotion, the default device, ...), so a program the stable cache
runs under one token is traced again when any of those change. A few configuration states are
read while tracing and left out of that context: `jax.random.key(0)` builds a key of
`jax_default_prng_impl`'s implementation, and `jax_legacy_prng_key` and `jax_enable_custom_prng`
decide what `jax.random.PRNGKey` returns, warns or raises; the concrete mesh of `jax.set_mesh`
(`device_context`: its devices, which a trace can read) is in JAX's compile key, not its trace
key, so JAX compiles again under another mesh from the trace it kept. Under one token JAX would
serve the
old program after they changed (for one function, plain `jax.jit` does too), and a rebuilt
function finds the old entry by key: the cache keys each entry by their values as well
(`_cache.py`), and a reused program's fingerprint holds them (`_fingerprint.context`).

Configuration read only while lowering or compiling is not here: it changes no trace. Of it,
what JAX keys its compiled programs by but not its traces (the optimisation levels,
`COMPILE_NAMES`) is in a reused program's fingerprint (`compile_only`), since JAX compiles again
when it changed. Where a JAX lacks one of these states, its value is `None`.
"""

from collections.abc import Callable, Hashable

import jax


NAMES = ("jax_default_prng_impl", "jax_legacy_prng_key", "jax_enable_custom_prng", "device_context")
COMPILE_NAMES = ("jax_optimization_level", "jax_memory_fitting_level")


class _Absent:
    """Stands for a state this JAX does not have (its value never changes)."""

    value = None


def _holders(names: tuple[str, ...]) -> tuple | None:
    """The holders of these states (`device_context` is no flag: a module attribute)."""
    try:
        import jax._src.config as jax_config

        holders = jax_config.config._value_holders  # pyright: ignore[reportPrivateUsage]
        return tuple(
            getattr(jax_config, name, _Absent)
            if name == "device_context"
            else holders.get(name, _Absent)
            for name in names
        )
    except (ImportError, AttributeError):  # pragma: no cover - moved: read through `jax.config`.
        return None


def _reader() -> Callable[[], Hashable]:
    found = _holders(NAMES)
    if found is None:  # pragma: no cover
        return lambda: tuple(getattr(jax.config, name, None) for name in NAMES)
    a, b, c, d = found

    # Four attribute reads (a third of a microsecond each), since this runs on every hit.
    def untraced() -> Hashable:
        return (a.value, b.value, c.value, d.value)

    return untraced


def _compile_reader() -> Callable[[], Hashable]:
    found = _holders(COMPILE_NAMES)
    if found is None:  # pragma: no cover
        return lambda: tuple(getattr(jax.config, name, None) for name in COMPILE_NAMES)
    return lambda: tuple(holder.value for holder in found)


untraced: Callable[[], Hashable] = _reader()
"""The values of the states in `NAMES` now (the thread's own, under a context manager)."""

compile_only: Callable[[], Hashable] = _compile_reader()
"""The values of the states in `COMPILE_NAMES` now: read only for a reused program's
fingerprint."""
