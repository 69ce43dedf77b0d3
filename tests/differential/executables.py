"""The differential corpus compiles the same small programs many times over: each situation runs
under four modes, plus plain `equinox.filter_jit` as a baseline, and every run starts with cleared
caches. XLA's compile is most of its time (a third less CPU time with this on), so the corpus and
its table share compiled executables through JAX's own persistent compilation cache, keyed by the
lowered program (it can only return the executable of the very same program), in a temporary
directory."""

import contextlib
import tempfile
from collections.abc import Iterator

import jax
from jax.experimental.compilation_cache import compilation_cache


@contextlib.contextmanager
def shared_executables() -> Iterator[None]:
    """Inside the block, every compiled program is kept in a temporary directory and reused by
    a later compile of the same program; JAX's options are restored afterwards."""
    with tempfile.TemporaryDirectory(prefix="eqxstable-differential-") as directory:
        options = {
            "jax_compilation_cache_dir": directory,
            "jax_persistent_cache_min_compile_time_secs": 0.0,
            "jax_persistent_cache_min_entry_size_bytes": 0,
        }
        old = {name: getattr(jax.config, name) for name in options}
        for name, value in options.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()
        try:
            yield
        finally:
            for name, value in old.items():
                jax.config.update(name, value)
            compilation_cache.reset_cache()
