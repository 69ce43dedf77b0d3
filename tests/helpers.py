"""Shared test helpers: two independent witnesses that a function did not recompile.

1. [`count_traces`][]: a `nonlocal`-style counter that runs in the Python body of the function, so
   it counts traces (equinox `tests/test_jit.py::test_num_traces`).
2. [`compile_log`][]: JAX's own compile log (`jax.log_compiles()`), captured as the names of the
   functions XLA compiled (optax `_src/test_utils.py`).

The library's own accounting (`cache_info()`, `.misses`) must agree with both.

Also what several test files need alike: [`counting_filter_jit`][] (plain `eqx.filter_jit` with a
trace counter), [`python_calls`][] (a count of work, not seconds), [`run_python`][] and
[`run_doctor`][] (a new process on the CPU from the checkout's root), [`run_racing`][] (threads
switching as often as CPython allows).

And user objects that the keys tests and the differential suite both meet: [`AlwaysEqual`][] (a
callable whose `==` calls every instance equal), [`PartialState`][] (an `==` that compares what
its `__getstate__` leaves out), and [`returns_its_partial`][] (a step returning the partial it
was given, with its trace counter).
"""

import contextlib
import dataclasses
import functools
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax


_F = TypeVar("_F", bound=Callable[..., Any])

# The checkout's root: a new process started there imports this checkout's `eqxstable`.
ROOT = Path(__file__).parent.parent

# JAX logs one record per stage when `jax.log_compiles()` is on; these two mark a finished trace
# and a finished XLA compilation. The name is what `jax.jit` calls the function (its `__name__`).
# Older JAX (0.4.38 to 0.7 at least) says "Finished tracing + transforming f for pjit".
_TRACED = re.compile(r"Finished tracing (?:\+ transforming )?(?P<name>\S+) for \w+ in")
_COMPILED = re.compile(r"Finished XLA compilation of \w+\((?P<name>.*)\) in")


@dataclasses.dataclass
class CompileLog:
    """What JAX reported inside a [`compile_log`][] block.

    - `compiled`: the name of every function XLA compiled, in order (one entry per compilation).
    - `traced`: the name of every function JAX traced to a jaxpr, in order.

    JAX compiles small helper programs too (`broadcast_in_dim`, `add`, ... when eager `jnp` code
    runs), so tests should count a *named* function: `log.count("f")`.
    """

    compiled: list[str] = dataclasses.field(default_factory=list)
    traced: list[str] = dataclasses.field(default_factory=list)

    def count(self, name: str) -> int:
        """The number of compilations of the function called `name`."""
        return self.compiled.count(name)


class _ToCompileLog(logging.Handler):
    def __init__(self, log: CompileLog):
        super().__init__(level=logging.DEBUG)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if match := _COMPILED.search(message):
            self.log.compiled.append(match["name"])
        elif match := _TRACED.search(message):
            self.log.traced.append(match["name"])


def enable_x64(new_val: bool = True) -> contextlib.AbstractContextManager:
    """`with enable_x64(True):` turns on 64-bit types in the block, on every JAX the project
    supports: `jax.enable_x64` where JAX has it, else `jax.experimental.enable_x64` (JAX 0.5.3
    has only the latter; the newest JAX only the former)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(new_val)
    from jax import experimental

    return experimental.enable_x64(new_val)  # pyright: ignore[reportAttributeAccessIssue]


# `jax.log_compiles()` flips a process-wide flag, so two blocks must not overlap.
_compile_log_lock = threading.Lock()


@contextlib.contextmanager
def compile_log() -> Iterator[CompileLog]:
    """Captures JAX's compile log for the duration of the block.

    **Returns:** a [`CompileLog`][] that fills up while the block runs.

    !!! example

        ```python
        with compile_log() as log:
            f(x)
            f(x)
        assert log.count("f") == 1
        ```
    """
    log = CompileLog()
    handler = _ToCompileLog(log)
    logger = logging.getLogger("jax")
    with _compile_log_lock, jax.log_compiles():
        logger.addHandler(handler)
        try:
            yield log
        finally:
            logger.removeHandler(handler)


class TraceCounter(Generic[_F]):
    """A function wrapper that counts how often its Python body runs, i.e. how often it is traced
    once it is jitted. Made by [`count_traces`][]."""

    # Set by `functools.update_wrapper`; declared so that type checkers know them.
    __name__: str
    __wrapped__: _F

    def __init__(self, fn: _F):
        self.fn = fn
        self.count = 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return self.fn(*args, **kwargs)


def count_traces(fn: _F) -> TraceCounter[_F]:
    """Wraps `fn` so that `.count` is the number of times its body ran. Jit the result:

    ```python
    def f(x):
        return x + 1

    counter = count_traces(f)
    jitted = es.filter_jit(counter)
    jitted(jnp.ones(3))
    jitted(jnp.ones(3))
    assert counter.count == 1
    ```

    The counter is mutable state, so it has an identity key: use it on the function being jitted,
    never on a callable that a test passes as a *static argument* expecting it to be interned.
    There, write the counter by hand with `nonlocal` in a function defined once, as in
    `test_count_traces_by_hand` in `tests/test_helpers.py`.
    """
    return TraceCounter(fn)


def counting_filter_jit(call: Callable[[Any, Any], Any]) -> tuple[Callable, Callable[[], int]]:
    """Plain `equinox.filter_jit` of `call(model, x)`, with a `nonlocal` trace counter inside the
    jitted function; returns the jitted function and a function reading the count."""
    traces = 0

    @eqx.filter_jit
    def run(model, x):
        nonlocal traces
        traces += 1
        return call(model, x)

    return run, lambda: traces


def rebindable(value: Any) -> tuple[Callable[[Any], Any], Callable[[Any], None]]:
    """`f(x) = x * c` closing over a variable `c = value`, and a function that rebinds `c` the
    way `nonlocal` code does: the same function object then computes something else."""
    c = value

    def f(x):
        return x * c

    def rebind(new):
        nonlocal c
        c = new

    return f, rebind


@functools.cache
def jax_explains_static_arguments() -> bool:
    """Whether this JAX explains a `jax.jit` cache miss caused by a static argument's new value
    (JAX 0.12 says "cache miss explanation unavailable"; the doctor then reports the compile as
    `unexplained` rather than `static`)."""
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("jax._src.interpreters.partial_eval")
    handler = _Collect()
    logger.addHandler(handler)
    try:
        with jax.explain_cache_misses(True):

            @functools.partial(jax.jit, static_argnums=1)
            def power(x, n):
                return x**n

            for n in (1, 2):
                power(1.0, n)
    finally:
        logger.removeHandler(handler)
    return any("Static(" in m for m in messages)


def started_walks(monkeypatch: Any) -> list:
    """The walk (`_numbering.Walk`) of each key computation started from now on: its `walked`
    counts the objects it walked. A count of work, not seconds: a time limit fails on a loaded
    machine and passes a slow rule on a fast one."""
    from eqxstable._keys import _context, _numbering

    walks = []

    class Counting(_numbering.Walk):
        def __init__(self) -> None:
            super().__init__()
            walks.append(self)

    monkeypatch.setattr(_context, "Walk", Counting)
    return walks


def run_python(*args: Any, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`python *args` (each `str`-ed) in a new process on the CPU (`JAX_PLATFORMS=cpu`), from
    `cwd` (the checkout's root by default, so that `-m eqxstable` is this checkout's), its output
    captured as text. The caller checks `returncode`: some tests expect a failure."""
    return subprocess.run(
        [sys.executable, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        timeout=300,
    )


def run_doctor(*args: Any, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`python -m eqxstable doctor *args` as [`run_python`][] runs it."""
    return run_python("-m", "eqxstable", "doctor", *args, cwd=cwd)


def python_calls(fn: Callable[[], Any], name: str | None = None, c_calls: bool = False) -> int:
    """The Python-level calls that `fn()` makes (only of functions called `name` when given; and
    of C functions too with `c_calls`), counted with `sys.setprofile`: a count of work, not
    seconds."""
    calls = 0
    events = ("call", "c_call") if c_calls else ("call",)

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event in events and (name is None or frame.f_code.co_name == name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def run_racing(threads: list[threading.Thread]) -> None:
    """Starts `threads` and waits for them, with CPython switching threads as often as it allows,
    so that a race shows in a short test; fails if one hangs."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads), "a thread hangs"


class AlwaysEqual:
    """A user's callable whose `==` says every instance is the same (whatever its `k`)."""

    def __init__(self, k):
        self.k = k

    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0

    def __call__(self, x):
        return x * self.k


class PartialState:
    """`==` compares both attributes; pickling (`__getstate__`) saves one."""

    def __init__(self, a, scale):
        self.a, self.scale = a, scale

    def __eq__(self, other):
        return type(other) is type(self) and (self.a, self.scale) == (other.a, other.scale)

    def __hash__(self):
        return hash(self.a)

    def __getstate__(self):
        return {"a": self.a}


def scale_by(x: Any, s: Any) -> Any:
    """`x * s`: the function of the partials that tests pass as static inputs."""
    return x * s


def returns_its_partial() -> tuple[Callable[[Any, Any], Any], Callable[[], int]]:
    """`step(x, p) = (p(x), p)`, a step that returns the static input it was given, with a
    `nonlocal` trace counter in its body; returns it and a function reading the count."""
    traces = 0

    def step(x, p):
        nonlocal traces
        traces += 1
        return p(x), p

    return step, lambda: traces
