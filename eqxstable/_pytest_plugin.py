"""A pytest plugin (entry point `pytest11`) that bounds how often eqxstable's `filter_jit` traces
in a test, without hand-written counters:

- `@pytest.mark.max_traces(n)`: the test fails if any stable `filter_jit`, `equinox.filter_jit`
    or `jax.jit` function traced more than `n` times while it ran, with that function's misses
    explained (`wrapper.explain()`, or as `eqxstable doctor` explains them).
- the `traces` fixture: `traces.count(f)` is how often `f` traced during the test so far.
- the `no_recompiles` fixture: the test runs as inside `with es.no_recompiles():`, where a
    function's first trace *in the test* is allowed.
- `pytest --eqxstable-verify`: every stable `filter_jit` runs in verify mode (as with
    `EQXSTABLE_VERIFY=1`), switched on before the rootdir `conftest.py` is imported, and for
    wrappers made before that too (`_verify.ON`).

eqxstable's jit layer (and so JAX and Equinox) is imported only when a test uses one of these, so
that merely having the plugin installed costs other test suites nothing; in particular a project
that instruments Equinox with jaxtyping's import hook (`--jaxtyping-packages=equinox,...`) still
can, since Equinox is not imported before its hook is installed.
"""

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


_MARKER_HELP = (
    "max_traces(n): fail the test if any `eqxstable.filter_jit`, `equinox.filter_jit` or "
    "`jax.jit` function traces more than n times while it runs; the failure explains each miss."
)
_MSG_MARKER = (
    "`@pytest.mark.max_traces(n)` takes one int n >= 0, the most traces any `es.filter_jit` "
    "function may make during the test; got {args!r}."
)
_MSG_OVER = (
    "`@pytest.mark.max_traces({limit})`: {count} {what} function(s) traced more "
    "than {limit} time(s) during this test."
)


_VERIFY_HELP = (
    "run every `eqxstable.filter_jit` in verify mode, as EQXSTABLE_VERIFY=1 does: each cache hit "
    "is traced again and compared with the program it reuses."
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("eqxstable")
    group.addoption("--eqxstable-verify", action="store_true", default=False, help=_VERIFY_HELP)


def _switch_on_verify() -> None:
    """Verify mode for the session: in the environment, for the jit layer when it is imported
    (and for subprocesses), and for every wrapper made already where it was imported before (by
    another plugin), without importing it here."""
    os.environ["EQXSTABLE_VERIFY"] = "1"
    verify = sys.modules.get("eqxstable._jit._verify")
    if verify is not None:
        verify.switch_on()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before the rootdir `conftest.py` is imported, which may make wrappers (shared jitted
    # helpers, model fixtures): `pytest_configure` comes after it.
    if getattr(early_config.known_args_namespace, "eqxstable_verify", False):
        _switch_on_verify()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    if config.getoption("eqxstable_verify"):
        # Again, where the option came from elsewhere than the command line (`addopts` is read
        # early too): wrappers made before are switched on as well (`_verify.ON`).
        _switch_on_verify()


class TraceWatch:
    """The traces of every stable [`eqxstable.filter_jit`][] during one test: wrappers alive when
    it starts, and any traced while it runs (kept alive until it stops, so that a wrapper defined
    inside the test is still there to be explained)."""

    def __init__(self):
        self._traced: dict[int, Any] = {}
        # Traces counted as they happen, by the counters they share (a wrapper and its pytree
        # copies count together): exact even when `cache_clear()` resets a wrapper's counters.
        self._counts: dict[int, int] = {}
        self._listening = False

    def start(self) -> "TraceWatch":
        from ._jit import miss_listeners

        miss_listeners.append(self._on_miss)
        self._listening = True
        return self

    def stop(self) -> None:
        from ._jit import miss_listeners

        if self._listening:
            self._listening = False
            miss_listeners.remove(self._on_miss)

    def _on_miss(self, wrapper: Any, miss: Any) -> None:
        del miss
        self._traced.setdefault(id(wrapper), wrapper)
        key = id(wrapper._stats)
        self._counts[key] = self._counts.get(key, 0) + 1

    def wrappers(self) -> list[Any]:
        """Every stable wrapper alive now or traced during the test."""
        from ._jit import live_wrappers

        found = {id(w): w for w in live_wrappers}
        found.update(self._traced)
        return list(found.values())

    def count(self, wrapper: Any) -> int:
        """How often `wrapper` (an `es.filter_jit` function) traced since the watch started."""
        return self._counts.get(id(wrapper._stats), 0)

    def over(self, limit: int) -> list[Any]:
        """The wrappers that traced more than `limit` times, most traces first."""
        found = [w for w in self.wrappers() if self.count(w) > limit]
        return sorted(found, key=self.count, reverse=True)

    def explain_one(self, wrapper: Any) -> str:
        """As `wrapper.explain()`, for the misses made during the test only."""
        count = self.count(wrapper)
        lines = [f"`{wrapper.name}` traced {count} time(s) during this test:"]
        # The latest misses (a `cache_clear()` during the test may have dropped earlier ones).
        kept = wrapper.misses
        misses = kept[max(0, len(kept) - count) :]
        # Numbered as `wrapper.explain()` numbers them.
        for i, miss in enumerate(misses, wrapper._stats.missed - len(misses) + 1):
            where = f" at `{miss.path}`" if miss.path else ""
            lines.append(f"  {i}. {miss.kind}{where}: {miss.reason}")
        return "\n".join(lines)

    def explain(self) -> str:
        """Every miss made during the test, by wrapper, as `wrapper.explain()` writes them."""
        return "\n".join(self.explain_one(w) for w in self.wrappers() if self.count(w))


def _limit(marker: pytest.Mark) -> int:
    args = marker.args
    if (
        len(args) != 1 or marker.kwargs or type(args[0]) is not int or args[0] < 0  # pyright: ignore[reportOperatorIssue]
    ):
        raise pytest.UsageError(_MSG_MARKER.format(args=(*args, *marker.kwargs.items())))
    return args[0]


def _explain_compiled(compiled: Any) -> str:
    """As `TraceWatch.explain_one`, for an `equinox.filter_jit` or `jax.jit` function as the
    doctor observed it."""
    jit = "`equinox.filter_jit`" if compiled.jit == "equinox" else "`jax.jit`"
    where = f"{compiled.location}, " if compiled.location else ""
    traces = compiled.traces
    lines = [f"`{compiled.name}` ({where}{jit}) traced {len(traces)} time(s) during this test:"]
    for i, miss in enumerate(traces, 1):
        at = f" at `{miss.path}`" if miss.path else ""
        lines.append(f"  {i}. {miss.kind}{at}: {miss.reason}")
    return "\n".join(lines)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    marker = item.get_closest_marker("max_traces")
    if marker is None:
        return (yield)
    limit = _limit(marker)
    # Every `equinox.filter_jit` and `jax.jit` the test runs is bounded too, as the doctor
    # observes them: a test of code that never uses eqxstable's own `filter_jit` is guarded too.
    from ._doctor._watch import watch as doctor_watch

    watch = TraceWatch().start()
    try:
        with doctor_watch() as observed:
            result = yield
    finally:
        watch.stop()
    over = watch.over(limit)
    # Traces of the Python function, not compiles: under `jax.grad` JAX compiles the programs it
    # derives from the function's one trace without tracing it again.
    others = [c for c in observed.compiled() if len(c.traces) > limit]
    if over or others:
        what = "jitted" if others else "stable `filter_jit`"
        lines = [_MSG_OVER.format(limit=limit, count=len(over) + len(others), what=what)]
        for wrapper in over:
            lines += ["", watch.explain_one(wrapper)]
        for compiled in others:
            lines += ["", _explain_compiled(compiled)]
        pytest.fail("\n".join(lines), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[Any]:
    # A guard's `RecompileError` is about the user's call: eqxstable's own frames, where it was
    # raised, are unlinked from the traceback (pytest rebuilds its entries from the raw chain, so
    # filtering the entries would not do).
    excinfo = call.excinfo
    if excinfo is not None and "eqxstable._errors" in sys.modules:
        from ._errors import RecompileError

        if isinstance(excinfo.value, RecompileError) and excinfo.tb is not None:
            package = os.path.dirname(os.path.abspath(__file__)) + os.sep
            kept = []
            tb = excinfo.tb
            while tb is not None:
                if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(package):
                    kept.append(tb)
                tb = tb.tb_next
            if kept and kept[0] is excinfo.tb:
                for before, after in zip(kept, [*kept[1:], None]):
                    before.tb_next = after
                excinfo.traceback = type(excinfo.traceback)(excinfo.tb)
    return (yield)


@pytest.fixture
def traces() -> Iterator[TraceWatch]:
    """How often each stable [`eqxstable.filter_jit`][] traced during the test:
    `traces.count(f)`, `traces.explain()`."""
    watch = TraceWatch().start()
    try:
        yield watch
    finally:
        watch.stop()


@pytest.fixture
def no_recompiles() -> Iterator[None]:
    """Runs the test as inside `with es.no_recompiles():`, counting from the test's start: a
    stable `filter_jit` that has already traced once *during the test* raises
    `es.RecompileError` instead of tracing again (its first trace in the test is allowed, even
    if an earlier test compiled it for other arguments)."""
    from ._jit import no_recompiles_within

    with no_recompiles_within():
        yield
