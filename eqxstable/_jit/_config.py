"""JAX's configuration that a trace reads but JAX leaves out of its own cache key.

JAX keys its caches by its trace context (`jax._src.config.trace_context()`: x64, matmul
precision, dtype and rank promotion, the default device, ...), so a program the stable cache
runs under one token is traced again when any of those change. A few configuration states are
read while tracing and left out of that context: `jax.random.key(0)` builds a key of
`jax_default_prng_impl`'s implementation, and `jax_legacy_prng_key` and `jax_enable_custom_prng`
decide what `jax.random.PRNGKey` returns, warns or raises. Under one token JAX would serve the
old program after they changed (for one function, plain `jax.jit` does too), and a rebuilt
function finds the old entry by key: the cache keys each entry by their values as well
(`_cache.py`), and a reused program's fingerprint holds them (`_fingerprint.context`).

Configuration read only while lowering or compiling (optimisation levels, `jax_debug_nans`) is
not here: it changes no trace. Where a JAX lacks one of these states, its value is `None`.
"""

from collections.abc import Callable, Hashable

import jax


NAMES = ("jax_default_prng_impl", "jax_legacy_prng_key", "jax_enable_custom_prng")


class _Absent:
    """Stands for a state this JAX does not have (its value never changes)."""

    value = None


def _reader() -> Callable[[], Hashable]:
    try:
        from jax._src.config import config as _jax_config

        holders = _jax_config._value_holders  # pyright: ignore[reportPrivateUsage]
        a, b, c = (holders.get(name, _Absent) for name in NAMES)
    except (ImportError, AttributeError):  # pragma: no cover - moved: read through `jax.config`.
        return lambda: tuple(getattr(jax.config, name, None) for name in NAMES)

    # Three attribute reads (a third of a microsecond each), since this runs on every hit.
    def untraced() -> Hashable:
        return (a.value, b.value, c.value)

    return untraced


untraced: Callable[[], Hashable] = _reader()
"""The values of the states in `NAMES` now (the thread's own, under a context manager)."""
