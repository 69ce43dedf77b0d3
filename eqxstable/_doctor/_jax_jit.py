"""Plain `jax.jit` compiles, as JAX itself reports them.

JAX explains each tracing-cache miss of a user's function when `jax_explain_cache_misses` is on:
a `TRACING CACHE MISS` log record naming the function, where it was defined, and the closest
earlier cache key's difference. A trace at top level also fires the `jax.monitoring` event
`/jax/core/compile/jaxpr_trace_duration` (with the function's name), and its XLA compile
`/jax/core/compile/backend_compile_duration` (with `jit(name)`). The watch pairs them: an
explanation followed by its function's trace event, which JAX then lowers
(`/jax/core/compile/jaxpr_to_mlir_module_duration`, with `jit(name)`), is one compile of that
function. A trace JAX does not lower compiles nothing (`jax.eval_shape`, `jax.make_jaxpr`: they
trace through `jax.jit`), and an explanation followed by a trace event of another name is no
`jax.jit` of its function (an eager `lax.cond` traces its branches, then jits `cond`). An
explanation without a trace event of its own is a `jax.jit` nested in another trace (inlined,
not compiled separately); a trace event without an explanation is JAX's own (an eager
operation, a library function). A user's function first traced inside another jitted function
and then called at top level compiles without tracing again: a compile event of a function that
JAX explained before, with no trace event of its own, is counted too.

Calls that hit JAX's cache run in C++ and are not seen, so `jax.jit` rows have no call count.
Explanations made while an `equinox.filter_jit` or stable `filter_jit` call runs belong to that
call's row and are left out here. The explanations are turned on for the watch alone
(`ExplainSwitch`): the script reads its own `jax_explain_cache_misses`, and a record reaches the
script's logging exactly when the script had the option on at the time (its environment, a
`jax.config.update` or a `with jax.explain_cache_misses(True)` of its own).

JAX < 0.9 explains its misses otherwise (`_compat.EXPLAINS_JIT_MISSES`): there the watch turns
nothing on, counts no `jax.jit` compile, and the report says so.
"""

import importlib.util
import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.monitoring
from jax._src import config as _jax_config, source_info_util

from .._compat import EXPLAINS_JIT_MISSES
from .._jit import COMPILE_EVENT, LOWER_EVENT, TRACE_EVENT
from ._compile_source import compiled_source
from ._explain_switch import ExplainSwitch, FirstSeen, quiet_while, SAME_LINE


_LOGGER = "jax._src.interpreters.partial_eval"
# With a persistent compilation cache, the same option makes these loggers warn too.
_ALSO_LOUDER = ("jax._src.compiler", "jax._src.compilation_cache")
_FIRST = re.compile(r"never seen function:\n\s+(?P<name>.+?) id=\d+(?: defined at (?P<at>\S+))?")
_AGAIN = re.compile(r"\n  for (?P<name>.+?)(?: defined at (?P<at>\S+))?\n")
_STATIC_METADATA = re.compile(r"<class '[\w.]+'> with pytree metadata ")
_INPUT_PATH = re.compile(r"at input path (\S+),")
_TYPES = re.compile(r"\* at (?P<path>.+?), now (?P<new>\S+) and before (?P<old>\S+)")
_UNAVAILABLE = "explanation unavailable"
# The place of a row for compiles that JAX named by a name several functions have, without
# saying which: not charged to any one of them.
_UNKNOWN_PLACE = "(one of several functions of this name: JAX did not say which)"
_PERSISTENT = ("persistent cache", "persistent compilation cache", "PERSISTENT")


# Where the `jax.jit`s inside a `filter_jit` are defined, eqxstable's programs and Equinox's: a
# program traced inside an outer trace and compiled at top level later is that `filter_jit`'s,
# counted (or not) in its own row, never a plain `jax.jit` row.
def _program_files() -> frozenset[str]:
    files = {str(Path(__file__).parent.parent / "_jit" / "_program.py")}
    try:
        # Equinox's `filter_jit` jits in `equinox/_jit.py` (if it moves: a row of its own).
        origin = importlib.util.find_spec("equinox._jit").origin  # pyright: ignore
    except (ImportError, AttributeError, ValueError):
        origin = None
    if origin:
        files |= {origin, str(Path(origin).resolve())}
    return frozenset(files)


_PROGRAM_FILES = _program_files()


def _ours(location: str) -> bool:
    return location.rpartition(":")[0] in _PROGRAM_FILES


class JaxMiss(NamedTuple):
    """One compile of a `jax.jit` function: `kind` and `path` as in `eqxstable.Miss`, `reason`
    with JAX's own explanation; `traced`: whether the function was traced for it (else JAX
    compiled what it derived from an earlier trace)."""

    kind: str
    path: str
    reason: str
    compile_seconds: float = 0.0
    traced: bool = True


class JaxRecord:
    """One row of the report for a `jax.jit` function (by name and place of definition)."""

    def __init__(self, name: str, location: str):
        self.name = name
        self.location = location
        self.misses: list[JaxMiss] = []
        self.compile_seconds = 0.0
        self.trace_seconds = 0.0


class _Explained(NamedTuple):
    name: str
    location: str
    miss: JaxMiss


class _Pending(threading.local):
    def __init__(self):
        self.explained: list[_Explained] = []
        # The record of the last counted trace, and whether any trace event came since the last
        # compile event.
        self.last: JaxRecord | None = None
        self.traced = False
        # The last trace at top level with its explanation and seconds, until JAX lowers it: a
        # trace nothing lowers (`jax.eval_shape`, `jax.make_jaxpr`) compiles nothing.
        self.trace: tuple[_Explained, float] | None = None


def _path(jax_path: str) -> str:
    # JAX's input path `[0][1]['a']` is into `(args, kwargs)`.
    if jax_path.startswith("[0]"):
        return "args" + jax_path[3:]
    if jax_path.startswith("[1]"):
        return "kwargs" + jax_path[3:]
    return jax_path


def _kind_of_types(new: str, old: str, text: str) -> str:
    if "weak_type" in text:
        return "weak_type"
    new_dtype, _, new_rest = new.partition("[")
    old_dtype, _, old_rest = old.partition("[")
    if new_dtype != old_dtype:
        return "dtype"
    if new_rest.split("]")[0] != old_rest.split("]")[0]:
        return "shape"
    return "sharding"


def parse(message: str, same_line: bool | None = None) -> _Explained | None:
    """The function and the miss in one `TRACING CACHE MISS` record, or `None`. `same_line`:
    whether a function defined on the same line was seen before, if not as the message says."""
    first = _FIRST.search(message)
    if first is not None:
        name, at = first["name"], first["at"] or ""
        if SAME_LINE in message if same_line is None else same_line:
            reason = (
                f"`jax.jit` was applied to a new `{name}` function object, defined on the same "
                'line as one it compiled before (JAX: "maybe the function is being re-defined '
                'repeatedly, preventing caching?"); define and jit it once, outside the loop.'
            )
            return _Explained(name, at, JaxMiss("identity", "(the jitted function)", reason))
        reason = f"first call of `{name}`: traced and compiled."
        return _Explained(name, at, JaxMiss("first", "", reason))
    again = _AGAIN.search(message)
    if again is None:
        return None
    name, at = again["name"], again["at"] or ""
    detail = message.split("For the closest previous key:", 1)[-1].strip()
    detail = _STATIC_METADATA.sub("", detail)
    detail = " ".join(line.strip().removeprefix("* ") for line in detail.splitlines())
    kind, path = "structure", ""
    if detail.startswith("different input pytree"):
        found = _INPUT_PATH.search(detail)
        path = _path(found[1]) if found else ""
        kind = "static" if "Static(" in detail else "structure"
    elif detail.startswith("different input types"):
        found = _TYPES.search(message)
        if found is not None:
            path = found["path"]
            kind = _kind_of_types(found["new"], found["old"], detail)
    elif detail.startswith("Tracing context"):
        kind = "context"
    elif _UNAVAILABLE in detail or not detail:
        # JAX 0.12 gives no explanation for some misses (a static argument with a new value,
        # measured): saying "structure" would name a cause JAX never gave.
        reason = (
            f'JAX did not say what differs ("{detail or "no explanation"}"); the input '
            "types are unchanged, so most often a static argument (`static_argnums`/"
            "`static_argnames`) has a new value: every distinct value compiles its own program. "
            "Pass it as an array if it changes often; if the new value is a new setting, the "
            "recompile is expected."
        )
        return _Explained(name, at, JaxMiss("unexplained", "", reason))
    reason = f"JAX's explanation: {detail}"
    return _Explained(name, at, JaxMiss(kind, path, reason))


class JaxJitWatch(logging.Filter):
    """Counts and explains the compiles of plain `jax.jit` functions. `busy()` says whether a
    `filter_jit` call is running in this thread (its compiles are counted there)."""

    def __init__(self, busy: Callable[[], bool]):
        super().__init__()
        self.busy = busy
        self.records: list[JaxRecord] = []
        self.installed = False
        self._by_function: dict[tuple[str, str], JaxRecord] = {}
        # Every user function JAX explained, also inside another trace: `jit(name)` -> where.
        self._known: dict[str, set[str]] = {}
        self._pending = _Pending()
        self._was = False
        self._listening = False
        self._switch: ExplainSwitch | None = None
        self._first = FirstSeen()
        self._unquiet: Callable[[], None] = lambda: None

    def install(self) -> bool:
        """Turns JAX's explanations on for the doctor. Returns whether this JAX can explain its
        misses."""
        if not EXPLAINS_JIT_MISSES:
            # Its explanations would be read wrongly, and JAX would log them to the script.
            return False
        self._switch = ExplainSwitch.install()
        if self._switch is not None:
            self._unquiet = quiet_while(self.busy, self._noted)
        else:
            try:
                self._was = bool(jax.config.jax_explain_cache_misses)  # pyright: ignore
                jax.config.update("jax_explain_cache_misses", True)
            except (AttributeError, KeyError, ValueError):
                return False
            for name in _ALSO_LOUDER:
                logging.getLogger(name).addFilter(self)
        logging.getLogger(_LOGGER).addFilter(self)
        self._listening = True
        jax.monitoring.register_event_duration_secs_listener(self._listener)
        self.installed = True
        return True

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        self._listening = False
        if self._switch is not None:
            self._unquiet()
            self._switch.uninstall()
        else:
            jax.config.update("jax_explain_cache_misses", self._was)
            for name in _ALSO_LOUDER:
                logging.getLogger(name).removeFilter(self)
        logging.getLogger(_LOGGER).removeFilter(self)
        unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
        if unregister is not None:
            unregister(self._listener)

    def _script_asked(self) -> bool:
        # Whether the script would see this record without the doctor: its own setting, global
        # or in a `with jax.explain_cache_misses(...)` of this thread, read now.
        if self._switch is None:
            return self._was
        return bool(_jax_config.explain_cache_misses.value)

    def _noted(self, fun: Any, debug_info: Any, quiet: bool) -> None:
        # A trace that JAX does not explain (`quiet_while`: a `filter_jit` call runs): what the
        # explanation would have told `filter`, which reads no more than this while busy. JAX
        # explains a function it never saw (by identity) as where it was called and defined;
        # one it saw again adds nothing the first did not.
        first = self._first.first(fun)
        if not quiet or not first or self._switch is None or self._script_asked():
            return
        filename = debug_info.func_filename
        if filename and not source_info_util.is_user_filename(filename):
            return
        src_info = f" defined at {filename}" if filename else ""
        if lineno := debug_info.func_lineno:
            src_info += f":{lineno}"
        callsite = source_info_util.summarize(source_info_util.current())
        self._switch.seen_callsite(f"TRACING CACHE MISS at {callsite}:", True)
        message = f"  never seen function:\n    {debug_info.func_name} id={id(fun)}{src_info}"
        explained = parse(message, False)
        if explained is not None and not _ours(explained.location):
            self._known.setdefault(f"jit({explained.name})", set()).add(explained.location)

    def filter(self, record: logging.LogRecord) -> bool:
        # Returns whether the record goes on to the script's own logging: only if it had asked.
        if record.name != _LOGGER:
            text = str(record.msg)
            return self._was or not any(word in text for word in _PERSISTENT)
        message = record.getMessage()
        if not message.startswith("TRACING CACHE MISS"):
            return True
        asked = self._script_asked()
        same_line = None
        if self._switch is not None and _FIRST.search(message) is not None:
            same_line = self._switch.seen_callsite(message, asked)
        explained = parse(message, same_line)
        if explained is not None and not _ours(explained.location):
            self._known.setdefault(f"jit({explained.name})", set()).add(explained.location)
            if not self.busy():
                self._pending.explained.append(explained)
        return asked

    def _listener(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        if not self._listening:
            return
        pending = self._pending
        if event == TRACE_EVENT:
            explained, pending.explained = pending.explained, []
            pending.traced = True
            pending.trace = None
            if self.busy() or not explained:
                return
            name = kwargs.get("fun_name")
            # The last explanation of that name is the top-level function's: nested `jax.jit`s
            # are explained while it traces, before it. None of that name: JAX traced its own
            # function (an eager `lax.cond` or `lax.scan` jits `cond`, `scan`) after tracing
            # the explained ones (its branches, its body) without jitting them.
            match = [e for e in explained if e.name == name] if name else explained[-1:]
            if match:
                pending.trace = (match[-1], duration_secs)
        elif event == LOWER_EVENT:
            # A trace counts once JAX lowers it to compile it (or for `.lower()`): one nothing
            # lowers was traced, not compiled (`jax.eval_shape`, `jax.make_jaxpr`; attack 13b-06).
            trace, pending.trace = pending.trace, None
            if trace is None or self.busy() or kwargs.get("fun_name") != f"jit({trace[0].name})":
                return
            explained_trace, seconds = trace
            record = self._record(explained_trace.name, explained_trace.location)
            record.misses.append(explained_trace.miss)
            record.trace_seconds += seconds
            pending.last = record
        elif event == COMPILE_EVENT:
            last, pending.last = pending.last, None
            traced, pending.traced = pending.traced, False
            name = kwargs.get("fun_name")
            if self.busy():
                return
            if last is not None and name == f"jit({last.name})":
                last.compile_seconds += duration_secs
                last.misses[-1] = last.misses[-1]._replace(compile_seconds=duration_secs)
            elif not traced and isinstance(name, str) and name in self._known:
                # The function JAX compiles, where its frames say (a name is not enough: every
                # lambda is `<lambda>`); a `filter_jit`'s derived program is that row's.
                source = compiled_source()
                if source is not None and _ours(source[1]):
                    return
                at = source[1] if source is not None else None
                # JAX fires no trace event for a trace under a transformation (`jax.grad` at a
                # new shape): its explanation waits here, and this compile is that trace's.
                own = [
                    e
                    for e in pending.explained
                    if f"jit({e.name})" == name and at in (None, e.location)
                ]
                if own:
                    pending.explained.remove(own[-1])
                    record = self._record(own[-1].name, own[-1].location)
                    record.misses.append(own[-1].miss._replace(compile_seconds=duration_secs))
                    record.compile_seconds += duration_secs
                    return
                record = self._derived(name, at)
                if record is None:
                    return
                # No trace: a program JAX derived from an earlier trace (a gradient's JVP or
                # transpose), or the top-level compile of a trace made inside another jitted
                # function; which one, the compile event does not say.
                reason = (
                    f"compiled without tracing `{record.name}` again: a program JAX made from an "
                    "earlier trace (its gradient or another transformation, or a call at top "
                    "level of what it traced inside another jitted function)."
                )
                record.misses.append(JaxMiss("first", "", reason, duration_secs, False))
                record.compile_seconds += duration_secs

    def _derived(self, name: str, at: str | None) -> JaxRecord | None:
        """The row of a compile with no trace of `name` (`jit(...)`) defined at `at` (from the
        compile's frames, `None` where they do not say): that function's, if JAX explained it;
        where only the name is known and several functions have it, a row that says so."""
        places = self._known[name]
        if at is not None:
            return self._record(name[4:-1], at) if at in places else None
        if len(places) == 1:
            return self._record(name[4:-1], next(iter(places)))
        return self._record(name[4:-1], _UNKNOWN_PLACE)

    def _record(self, name: str, location: str) -> JaxRecord:
        record = self._by_function.get((name, location))
        if record is None:
            record = self._by_function[(name, location)] = JaxRecord(name, location)
            self.records.append(record)
        return record
