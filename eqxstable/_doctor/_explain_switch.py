"""Turning JAX's tracing-cache explanations on for the doctor alone (`ExplainSwitch`), so that
the script reads its own `jax_explain_cache_misses` and sees only the records it asked for; and
off again while every watch is busy (`quiet_while`), where the doctor reads only which function
JAX traced and the explanation is all cost."""

import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from jax._src import config as _jax_config, source_info_util


SAME_LINE = "seen another function defined on the same line"


class _Quiet(threading.local):
    on = False


_quiet = _Quiet()


class _AlwaysOn:
    """`explain_cache_misses` as the doctor's copy of JAX's configuration reads it: on, but
    while `quiet_while`'s watches are all busy in this thread, where it is the script's own."""

    @property
    def value(self) -> bool:
        return not _quiet.on or bool(_jax_config.explain_cache_misses.value)


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


# Function: callbacks `(busy, note)` of the watches that asked for quiet traces.
_quiet_watches: list[tuple[Callable[[], bool], Callable[[Any, Any, bool], None]]] = []


def _library(debug_info: Any) -> bool:
    # A function JAX's explanation passes over, saying nothing (not the user's code: JAX's own,
    # as every eager operation's, or a file registered as an exclusion).
    filename = getattr(debug_info, "func_filename", None)
    return bool(filename) and not source_info_util.is_user_filename(filename)


class _Traces:
    """`partial_eval.trace_to_jaxpr` while a watch asked for quiet traces. JAX's explanation is
    off for a trace where every watch is busy (a `filter_jit` call runs in this thread; the
    report counts its traces in that call's row) or of a function the explanation passes over
    in silence (not user code: every eager operation's), unless the script asked for it. Each
    watch's `note(fun, debug_info, quiet)` hears of every trace, before it. A miss that JAX
    explains makes the key of every entry of its trace cache, which holds every function traced
    so far (`maxsize=None`): a cost that grows with the run (lineax's selection: 3,032 misses
    of a cache that grew to 1,179 entries, about 1.8 million keys made, 2 s of garbage
    collection). Anything else is the real function's."""

    def __init__(self, cached: Any):
        self._cached = cached

    def __call__(self, fun: Any, *args: Any, **kwargs: Any) -> Any:
        debug_info = args[1] if len(args) > 1 else kwargs.get("debug_info")
        quiet = debug_info is not None and (
            _library(debug_info) or all(busy() for busy, _ in _quiet_watches)
        )
        if debug_info is not None:
            for _, note in _quiet_watches:
                note(fun, debug_info, quiet)
        previous = _quiet.on
        _quiet.on = quiet
        try:
            return self._cached(fun, *args, **kwargs)
        finally:
            _quiet.on = previous

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cached, name)


def quiet_while(
    busy: Callable[[], bool], note: Callable[[Any, Any, bool], None]
) -> Callable[[], None]:
    """JAX explains no trace made while `busy()` and every other such watch's is true (nor any
    of a function that is not user code), unless the script asked; `note(fun, debug_info,
    quiet)` hears of every trace, before it. Returns the function that undoes it. Without JAX's
    `trace_to_jaxpr` of this form, nothing changes."""
    partial_eval = sys.modules.get("jax._src.interpreters.partial_eval")
    current = getattr(partial_eval, "trace_to_jaxpr", None)
    if current is None or not hasattr(current, "cache_info"):
        return lambda: None
    watch = (busy, note)
    with ExplainSwitch._lock:
        _quiet_watches.append(watch)
        if __file__ not in getattr(source_info_util, "_exclude_paths", [__file__]):
            # Not the user's frame: JAX's explanation names the innermost user frame as where
            # the function was called ("TRACING CACHE MISS at ..."), and this file's `_Traces`
            # is now on every trace's stack.
            source_info_util.register_exclusion(__file__)
        if not isinstance(current, _Traces):
            partial_eval.trace_to_jaxpr = _Traces(current)  # pyright: ignore

    def undo() -> None:
        with ExplainSwitch._lock:
            if watch in _quiet_watches:
                _quiet_watches.remove(watch)
            installed = getattr(partial_eval, "trace_to_jaxpr", None)
            if not _quiet_watches and isinstance(installed, _Traces):
                partial_eval.trace_to_jaxpr = installed._cached  # pyright: ignore

    return undo


class FirstSeen:
    """Whether a function object is met for the first time, by identity (as JAX's explanation
    says "never seen function"): remembered while it lives. After `jax.clear_caches()` JAX sees
    a function anew; here it stays seen, which changes only where the doctor remembers a new
    function traced quietly was called from (a place it remembered the first time)."""

    def __init__(self):
        self._seen: dict[int, weakref.ref] = {}

    def first(self, fun: Any) -> bool:
        key = id(fun)
        held = self._seen.get(key)
        if held is not None and held() is fun:
            return False
        seen = self._seen
        try:
            seen[key] = weakref.ref(fun, lambda _, key=key: seen.pop(key, None))
        except TypeError:
            return True
        return True
