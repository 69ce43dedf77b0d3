"""Turning JAX's tracing-cache explanations on for the doctor alone (`ExplainSwitch`), so that
the script reads its own `jax_explain_cache_misses` and sees only the records it asked for."""

import sys
import threading
from typing import Any

from jax._src import config as _jax_config


SAME_LINE = "seen another function defined on the same line"


class _AlwaysOn:
    """`explain_cache_misses` as the doctor's copy of JAX's configuration reads it."""

    value = True


class _ExplainingConfig:
    """JAX's configuration module as the explaining cache reads it: the same in everything but
    `explain_cache_misses`, which is on."""

    explain_cache_misses = _AlwaysOn()

    def __init__(self, real: Any):
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class ExplainSwitch:
    """Turns JAX's tracing-cache explanations on for the doctor alone. JAX explains a miss of
    `trace_to_jaxpr` (`partial_eval.explain`) when `config.explain_cache_misses.value`, read by
    the cache in `jax._src.util` through that module's `config` name; that name, and nothing
    the script can read, is switched. `jax.config.jax_explain_cache_misses` keeps the script's
    value, and so do the compiler's own messages, which read the real option.

    One more trace the explanations leave: JAX remembers where it explained a new function
    (`callsites_with_tracing_cache_miss`), to say "seen another function defined on the same
    line" next time. A place remembered only because of the doctor is forgotten again, so the
    script's own explanations say what they would say without it; the doctor keeps its own."""

    # How many switches are on (the doctor's and a pytest plugin's watch may nest, and end in
    # any order): JAX's module reads the real configuration again when the last one ends.
    _on = 0
    _lock = threading.Lock()

    def __init__(self, util: Any):
        self._util = util
        self._callsites: set[str] = set()
        partial_eval = sys.modules.get("jax._src.interpreters.partial_eval")
        found = getattr(partial_eval, "callsites_with_tracing_cache_miss", None)
        self._jax_callsites: set[str] | None = found if isinstance(found, set) else None

    @classmethod
    def install(cls) -> "ExplainSwitch | None":
        try:
            from jax._src import util
        except ImportError:
            return None
        with cls._lock:
            read = getattr(util, "config", None)
            if isinstance(read, _ExplainingConfig):
                read = read._real
            if read is not _jax_config or not hasattr(read, "explain_cache_misses"):
                return None
            util.config = _ExplainingConfig(read)  # pyright: ignore[reportAttributeAccessIssue]
            cls._on += 1
        return cls(util)

    def uninstall(self) -> None:
        cls = type(self)
        with cls._lock:
            cls._on -= 1
            read = getattr(self._util, "config", None)
            if cls._on == 0 and isinstance(read, _ExplainingConfig):
                self._util.config = read._real

    def seen_callsite(self, message: str, asked: bool) -> bool:
        """Whether the doctor saw a new function explained at this record's place before.
        Forgets the place on JAX's side if JAX remembered it for the doctor only."""
        first_line = message.split("\n", 1)[0]
        callsite = first_line.removeprefix("TRACING CACHE MISS at ").removesuffix(":")
        seen = callsite in self._callsites
        self._callsites.add(callsite)
        if not asked and SAME_LINE not in message and self._jax_callsites is not None:
            self._jax_callsites.discard(callsite)
        return seen
