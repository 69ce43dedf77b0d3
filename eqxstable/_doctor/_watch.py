"""The doctor's observation of compiles, for a block of code instead of a whole script.

`watch()` installs the same hooks `eqxstable doctor` runs a script under (`Observer` for every
`equinox.filter_jit`, `JaxJitWatch` for plain `jax.jit`), and gives the compiles each function
made inside the block, explained as the doctor explains them. The pytest plugin's
`@pytest.mark.max_traces(n)` bounds them.

Every `equinox.filter_jit` call is predicted too, as the doctor predicts the wrappers a script
makes (`Observer(only_made=False)`): the explanation of a miss rests on the prediction (a rebuilt
lambda Equinox compares by identity is `identity at args[1]`, and the fix, where without it the
arguments look the same as before and the miss reads as JAX's cache having lost the program,
attack 13b-04). The prediction counts nothing: `max_traces` bounds the traces Equinox made.
"""

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from .._jit import current
from ._jax_jit import JaxJitWatch
from ._observe import Observer


class Compiled(NamedTuple):
    """One function's compiles inside the block: `jit` is "equinox" or "jax"; `misses` have
    `kind`, `path` and `reason` as `eqxstable.Miss`, and `traced`: whether the function was
    traced for it (a gradient's compile under `jax.grad` is not)."""

    name: str
    location: str
    jit: str
    misses: tuple[Any, ...]

    @property
    def traces(self) -> tuple[Any, ...]:
        """The misses that traced the function (what `@pytest.mark.max_traces` bounds)."""
        return tuple(m for m in self.misses if m.traced)


class Watched:
    """What `watch()` yields: `compiled()` lists the functions that compiled so far."""

    def __init__(self, observer: Observer, jax_watch: JaxJitWatch):
        self._observer = observer
        self._jax = jax_watch

    @property
    def explains_jax_jit(self) -> bool:
        """Whether this JAX explains (and so lets the watch count) `jax.jit` compiles."""
        return self._jax.installed

    def compiled(self) -> list[Compiled]:
        out = [
            Compiled(r.name, r.location, "equinox", tuple(r.misses))
            for r in self._observer.records
            if r.misses
        ]
        out += [
            Compiled(r.name, r.location, "jax", tuple(r.misses))
            for r in self._jax.records
            if r.misses
        ]
        return out


@contextlib.contextmanager
def watch() -> Iterator[Watched]:
    """Observes every `equinox.filter_jit` and `jax.jit` compile inside the block.

    **Arguments:** None.

    **Returns:** A context manager yielding a `Watched`.
    """
    observer = Observer()
    observer.install()
    jax_watch = JaxJitWatch(lambda: observer.running() or current.call is not None)
    try:
        jax_watch.install()
        yield Watched(observer, jax_watch)
    finally:
        jax_watch.uninstall()
        observer.uninstall()
