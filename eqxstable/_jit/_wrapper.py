"""The stable `filter_jit`: a drop-in for `equinox.filter_jit` whose static arguments are compared
by `stable_key`, type-exactly, and that accounts for and explains every recompilation."""

import dataclasses
import functools as ft
import warnings
from collections.abc import Callable
from typing import Any, Generic, Literal, overload, TYPE_CHECKING, TypeVar

import equinox as eqx
import jax.tree_util as jtu
from typing_extensions import ParamSpec

from .._keys import compute
from . import _verify
from ._accounting import CacheInfo, Call, current, live_wrappers, Miss, Stats
from ._describe import describe_change
from ._guards import OnRecompile
from ._program import alias_program, get_program


# `jtu.tree_flatten` is a Python wrapper around this; calling it directly saves its frame.
_flatten = jtu.default_registry.flatten
_P = ParamSpec("_P")
_T = TypeVar("_T")

Donate = Literal["all", "all-except-first", "warn", "warn-except-first", "none"]
_DONATE: dict[str, tuple[str, bool]] = {
    # mode -> (which leaves are donated, whether "donated buffers were not usable" is silenced)
    "all": ("all", True),
    "all-except-first": ("all-except-first", True),
    "warn": ("all", False),
    "warn-except-first": ("all-except-first", False),
    "none": ("none", False),
}
_FORBIDDEN_JITKWARGS = (
    "static_argnums",
    "static_argnames",
    "donate_argnums",
    "donate_argnames",
    "in_shardings",
    "out_shardings",
)

_MSG_DONATE = (
    "`es.filter_jit(..., donate={donate!r})` is not a donation mode: use one of 'all', "
    "'all-except-first', 'warn', 'warn-except-first' or 'none'."
)
_MSG_ON_RECOMPILE = (
    "`es.filter_jit(..., on_recompile={value!r})` is not an option: use 'ignore', 'warn' or "
    "'raise'."
)
_MSG_MAX_TRACES = (
    "`es.filter_jit(..., max_traces={value!r})` should be a positive int or None (no limit)."
)
_MSG_JITKWARGS = (
    "`es.filter_jit(..., {name}=...)` is not supported: arrays are traced and everything else is "
    "static, and donation is chosen with `donate=...`."
)
_MSG_LOWERED_MISMATCH = (
    "`{name}.lower(...).compile()` was called with arguments whose static parts or structure "
    "differ from those it was lowered with; lower it again for these arguments."
)


@dataclasses.dataclass(frozen=True, eq=False, repr=False, init=False)
class _JitWrapper(Generic[_P, _T]):
    """The callable returned by [`eqxstable.filter_jit`][].

    It is a frozen dataclass of the function and the options only, so that `stable_key` keys it
    by value (two wrappers of equivalent functions with the same options are equivalent) and a
    wrapper used as a static value never looks mutated. What changes on every call (the compiled
    programs and the counters) lives in slots, which are not part of its key.
    """

    __slots__ = (
        "_program",
        "_stats",
        "_fun_dynamic",
        "_fun_template",
        "_fun_key",
        "_fun_watch",
        "_rebound",
        "_filter_warning",
        "_verifying",
        "__dict__",
        "__weakref__",
    )

    fun: Callable[_P, _T]
    donate: Donate
    max_traces: int | None
    on_recompile: OnRecompile
    jitkwargs: tuple[tuple[str, Any], ...]
    verify: bool | None

    if TYPE_CHECKING:
        # Copied from `fun` as `functools.update_wrapper` does.
        __name__: str
        __qualname__: str
        __wrapped__: Callable[_P, _T]

    def __init__(
        self,
        fun: Callable[_P, _T],
        donate: Donate,
        max_traces: int | None,
        on_recompile: OnRecompile,
        jitkwargs: dict[str, Any],
        verify: bool | None = None,
    ):
        init = ft.partial(object.__setattr__, self)
        init("fun", fun)
        init("donate", donate)
        init("max_traces", max_traces)
        init("on_recompile", on_recompile)
        init("jitkwargs", tuple(sorted(jitkwargs.items())))
        init("verify", verify)
        # Decided once: reading the environment on every call would cost the hit path.
        init("_verifying", _verify.enabled(verify))
        which, filter_warning = _DONATE[donate]
        program = get_program(fun, which, jitkwargs)
        # As `functools.update_wrapper`, which a frozen dataclass does not allow.
        for name in ft.WRAPPER_ASSIGNMENTS:
            try:
                init(name, getattr(fun, name))
            except AttributeError:
                pass
        own = {f.name for f in dataclasses.fields(self)}
        for name, value in getattr(fun, "__dict__", {}).items():
            if name not in own:
                self.__dict__[name] = value
        init("__wrapped__", fun)
        # A callable object (a module) has no names of its own: use those of its class.
        if "__name__" not in self.__dict__:
            init("__name__", program.name)
            init("__qualname__", program.qualname)
        self._use(program, None)
        init("_filter_warning", filter_warning)
        init("_stats", Stats())
        live_wrappers.add(self)

    def _use(self, program: Any, rebound: str | None) -> None:
        """Calls `program` from now on, with the function as it is now."""
        init = ft.partial(object.__setattr__, self)
        init("_program", program)
        init("_fun_dynamic", program.fun_dynamic(self.fun))
        init("_fun_template", program.fun_template(self.fun))
        self._resnapshot()
        # What changed in the function, for the next miss: it is of kind "mutated".
        init("_rebound", rebound)

    def _resnapshot(self) -> None:
        key, watch = compute(self.fun)
        object.__setattr__(self, "_fun_key", key)
        object.__setattr__(self, "_fun_watch", watch)

    def _check_fun(self) -> Any:
        """The program to call: the function itself may have changed since the last call (a
        closure cell rebound, a global it reads reassigned). An equal key keeps the program; a
        changed function gets the program of its new key, and its next miss says what changed."""
        if not self._fun_watch.valid():
            old = self._fun_key
            key, watch = compute(self.fun)
            object.__setattr__(self, "_fun_watch", watch)
            if key != old:
                object.__setattr__(self, "_fun_key", key)
                which, _ = _DONATE[self.donate]
                program = get_program(self.fun, which, dict(self.jitkwargs))
                rebound = None
                if self._stats.calls:
                    # Before its first call, a wrapper has nothing stale to explain.
                    what = describe_change(old, key)
                    rebound = (
                        f"`{self.name}` had a value it reads rebound after it was used ({what})"
                    )
                self._use(program, rebound)
        elif self._rebound is not None:
            object.__setattr__(self, "_rebound", None)
        return self._program

    @property
    def name(self) -> str:
        return self._program.qualname

    def __call__(self, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        __tracebackhide__ = True
        leaves, treedef = _flatten((args, kwargs), None)
        program = self._check_fun()
        entry = program.cache.lookup(leaves, treedef)
        donated, kept = entry.split(leaves)
        call = Call(program, self, args, kwargs, entry, False)
        previous = current.call
        current.call = call
        try:
            if self._filter_warning:
                with warnings.catch_warnings():
                    warnings.filterwarnings(
                        "ignore", message="Some donated buffers were not usable*"
                    )
                    out = program.jitted(donated, kept, self._fun_dynamic, entry)
            else:
                out = program.jitted(donated, kept, self._fun_dynamic, entry)
        except BaseException:
            # A call that failed before its miss was recorded (an error while tracing, or a
            # guard that refused to recompile) did not happen as far as the counters go.
            if call.committed:
                self._stats.calls += 1
            raise
        finally:
            current.call = previous
        self._stats.calls += 1
        verified = False
        if self._verifying:
            if call.committed:
                _verify.record(program, entry, donated, kept, self._fun_dynamic)
            else:
                _verify.check(program, self, entry, donated, kept, self._fun_dynamic)
                # The check traced the function: what it changed in itself then is part of the
                # program too, as after any trace.
                program.cache.rekey(entry)
                verified = True
        if call.committed or verified:
            # What the function changed in itself while traced (a `nonlocal` trace counter) is
            # not a change after the program was made.
            self._resnapshot()
            alias_program(program, self.fun)
        return out

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        del owner
        if instance is None:
            return self
        # An `equinox.Partial` is a pytree, so a bound method passed on to another transform
        # keeps the module's arrays traced, as with `equinox.filter_jit`.
        return eqx.Partial(self, instance)

    def lower(self, /, *args, **kwargs) -> "Lowered":
        """Lowers the function for these arguments, as `jax.jit(...).lower`.

        **Returns:** a `Lowered` with `.as_text()` and `.compile()`; the compiled program is
        called with arguments of the same structure and static values.
        """
        leaves, treedef = _flatten((args, kwargs), None)
        program = self._check_fun()
        entry = program.cache.lookup(leaves, treedef)
        donated, kept = entry.split(leaves)
        previous = current.call
        current.call = Call(program, self, args, kwargs, entry, True)
        try:
            lowered = program.jitted.lower(donated, kept, self._fun_dynamic, entry)
        finally:
            current.call = previous
        # Lowering traced the function: what it changed in itself then is not a later change.
        self._resnapshot()
        program.cache.rekey(entry)
        return Lowered(lowered, self, entry)

    def cache_info(self) -> CacheInfo:
        """The wrapper's counters, in the shape of `functools.lru_cache`'s:
        `CacheInfo(hits, misses, maxsize, currsize, compile_seconds, trace_seconds)`."""
        stats = self._stats
        misses = len(stats.misses)
        return CacheInfo(
            hits=stats.calls - misses,
            misses=misses,
            maxsize=None,
            currsize=self._program.compiled,
            compile_seconds=stats.compile_seconds,
            trace_seconds=stats.trace_seconds,
        )

    def cache_clear(self) -> None:
        """Drops the compiled programs and resets the counters."""
        self._program.clear()
        self._stats.clear()

    @property
    def misses(self) -> tuple[Miss, ...]:
        """One [`eqxstable.Miss`][] per miss, in order."""
        return tuple(self._stats.misses)

    def explain(self) -> str:
        """Every miss so far, one numbered paragraph each."""
        info = self.cache_info()
        lines = [
            f"`{self.name}`: {info.hits + info.misses} calls, {info.hits} hits, "
            f"{info.misses} misses."
        ]
        for i, miss in enumerate(self._stats.misses, 1):
            where = f" at `{miss.path}`" if miss.path else ""
            lines.append(f"  {i}. {miss.kind}{where}: {miss.reason}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<stable filter_jit of {self.name}>"


class Lowered:
    """What [`eqxstable.filter_jit`][]`(f).lower(...)` returns."""

    def __init__(self, lowered: Any, wrapper: _JitWrapper, entry: Any):
        self.lowered = lowered
        self._wrapper = wrapper
        self._entry = entry

    def as_text(self, *args, **kwargs) -> str:
        return self.lowered.as_text(*args, **kwargs)

    def compile(self, compiler_options: dict[str, str | bool] | None = None) -> "Compiled":
        compiled = self.lowered.compile(compiler_options=compiler_options)
        return Compiled(compiled, self._wrapper, self._entry)


class Compiled:
    """A compiled program for one set of static arguments; call it like the function."""

    def __init__(self, compiled: Any, wrapper: _JitWrapper, entry: Any):
        self.compiled = compiled
        self._wrapper = wrapper
        self._entry = entry

    def __call__(self, *args, **kwargs):
        leaves, treedef = _flatten((args, kwargs), None)
        wrapper = self._wrapper
        if wrapper._program.cache.lookup(leaves, treedef) is not self._entry:
            raise TypeError(_MSG_LOWERED_MISMATCH.format(name=wrapper.name))
        donated, kept = self._entry.split(leaves)
        return self.compiled(donated, kept, wrapper._fun_dynamic)

    def as_text(self) -> str:
        return self.compiled.as_text()


@overload
def filter_jit(
    *,
    donate: Donate = "none",
    max_traces: int | None = None,
    on_recompile: OnRecompile = "ignore",
    verify: bool | None = None,
) -> Callable[[Callable[_P, _T]], _JitWrapper[_P, _T]]: ...


@overload
def filter_jit(
    fun: Callable[_P, _T],
    /,
    *,
    donate: Donate = "none",
    max_traces: int | None = None,
    on_recompile: OnRecompile = "ignore",
    verify: bool | None = None,
) -> _JitWrapper[_P, _T]: ...


def filter_jit(
    fun=None,
    /,
    *,
    donate: Donate = "none",
    max_traces: int | None = None,
    on_recompile: OnRecompile = "ignore",
    verify: bool | None = None,
    **jitkwargs: Any,
) -> Any:
    """A drop-in for `equinox.filter_jit`: JAX and NumPy arrays are traced, everything else is
    static. Static values are compared by [`eqxstable.stable_key`][], so an equivalent rebuilt
    callable (a new lambda, `optax.adam(1e-3)` built again) reuses the compiled program even
    inside a plain `equinox.Module`, and keys are type-exact, so `1`, `1.0` and `True` never
    share a program. Every miss is counted and explained.

    **Arguments:**

    - `fun`: the function to compile. May be omitted, to use `filter_jit(...)` as a decorator.
    - `donate`: as in `equinox.filter_jit`: `'all'`, `'all-except-first'`, `'warn'`,
        `'warn-except-first'` or `'none'` (the default).
    - `max_traces`: if set, the trace after the `max_traces`-th raises
        [`eqxstable.RecompileError`][] with that miss's reason, before compiling.
    - `on_recompile`: what to do for each miss after the first: `'ignore'` (the default),
        `'warn'` ([`eqxstable.RecompileWarning`][]) or `'raise'` ([`eqxstable.RecompileError`][]).
    - `verify`: if `True`, every call that reuses a program also traces itself to a jaxpr and
        compares it with the one the program was compiled from, raising
        [`eqxstable.StaleProgramError`][] on a difference. `None` (the default) follows the
        `EQXSTABLE_VERIFY` environment variable (`pytest --eqxstable-verify` sets it).

    **Returns:**

    The compiled function, with `.cache_info()`, `.cache_clear()`, `.misses`, `.explain()` and
    `.lower(...)`.

    !!! example

        ```python
        @es.filter_jit(on_recompile="warn")
        def loss(model, x):
            return jnp.mean(model(x) ** 2)

        loss(model, x)
        print(loss.cache_info())  # CacheInfo(hits=0, misses=1, ...)
        print(loss.explain())
        ```

    !!! info

        Calls are dispatched asynchronously, as with `jax.jit`: errors raised with
        `equinox.error_if` surface when the result is used or blocked on.
    """
    if donate not in _DONATE:
        raise ValueError(_MSG_DONATE.format(donate=donate))
    if on_recompile not in ("ignore", "warn", "raise"):
        raise ValueError(_MSG_ON_RECOMPILE.format(value=on_recompile))
    if max_traces is not None and (
        type(max_traces) is not int or max_traces < 1  # pyright: ignore[reportUnnecessaryComparison]
    ):
        raise ValueError(_MSG_MAX_TRACES.format(value=max_traces))
    for name in _FORBIDDEN_JITKWARGS:
        if name in jitkwargs:
            raise ValueError(_MSG_JITKWARGS.format(name=name))
    if fun is None:
        return ft.partial(
            filter_jit,
            donate=donate,
            max_traces=max_traces,
            on_recompile=on_recompile,
            verify=verify,
            **jitkwargs,
        )
    return _JitWrapper(fun, donate, max_traces, on_recompile, jitkwargs, verify)
