"""[`eqxstable.filter_jit`][]: a drop-in for `equinox.filter_jit` whose static arguments are
compared by `stable_key`, type-exactly, and that accounts for and explains every recompilation.
This file checks the options; `_wrapper.py` is the callable it returns."""

import functools as ft
from collections.abc import Callable
from typing import Any, Literal, overload, TypeVar

from typing_extensions import ParamSpec

from ._guards import OnRecompile
from ._state import DONATE_MODES
from ._wrapper import _JitWrapper, make_wrapper


_P = ParamSpec("_P")
_T = TypeVar("_T")

Donate = Literal["all", "all-except-first", "warn", "warn-except-first", "none"]

_FORBIDDEN_JITKWARGS = (
    "static_argnums",
    "static_argnames",
    "donate_argnums",
    "donate_argnames",
    "in_shardings",
    "out_shardings",
)

_MSG_BAD_DONATE = (
    "`es.filter_jit(..., donate={donate!r})` is not a donation mode: use one of 'all', "
    "'all-except-first', 'warn', 'warn-except-first' or 'none'."
)
_MSG_BAD_ON_RECOMPILE = (
    "`es.filter_jit(..., on_recompile={value!r})` is not an option: use 'ignore', 'warn' or "
    "'raise'."
)
_MSG_BAD_MAX_TRACES = (
    "`es.filter_jit(..., max_traces={value!r})` should be a positive int or None (no limit)."
)
_MSG_BAD_JITKWARGS = (
    "`es.filter_jit(..., {name}=...)` is not supported: arrays are traced and everything else is "
    "static, and donation is chosen with `donate=...`."
)
_MSG_NOT_CALLABLE = (
    "`es.filter_jit(fun)` should be given a callable (a function, a method or a module with "
    "`__call__`), not {type} {value}. To pass options, write `es.filter_jit(donate=...)` and "
    "apply the result to the function."
)


@overload
def filter_jit(
    fun: Callable[_P, _T],
    *,
    donate: Donate = "none",
    max_traces: int | None = None,
    on_recompile: OnRecompile = "ignore",
    verify: bool | None = None,
    **jitkwargs: Any,
) -> _JitWrapper[_P, _T]: ...


@overload
def filter_jit(
    *,
    donate: Donate = "none",
    max_traces: int | None = None,
    on_recompile: OnRecompile = "ignore",
    verify: bool | None = None,
    **jitkwargs: Any,
) -> Callable[[Callable[_P, _T]], _JitWrapper[_P, _T]]: ...


def filter_jit(
    fun=None,
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

    - `fun`: the function (or method, or callable module) to compile; its arrays are traced
        like those of the arguments. May be omitted, to use `filter_jit(...)` as a decorator.
    - `donate`: as in `equinox.filter_jit`: `'all'`, `'all-except-first'`, `'warn'`,
        `'warn-except-first'` or `'none'` (the default).
    - `max_traces`: if set, the trace after the `max_traces`-th raises
        [`eqxstable.RecompileError`][] with that miss's reason, before compiling.
    - `on_recompile`: what to do for each miss after the first: `'ignore'` (the default),
        `'warn'` ([`eqxstable.RecompileWarning`][]) or `'raise'` ([`eqxstable.RecompileError`][]).
    - `verify`: if `True`, every call that reuses a program also traces itself to a jaxpr and
        compares it with the one the program was compiled from, raising
        [`eqxstable.StaleProgramError`][] on a difference. `None` (the default) follows the
        `EQXSTABLE_VERIFY` environment variable as it is when the wrapper is made (or the jit
        layer imported), and `pytest --eqxstable-verify`, which switches verify mode on for
        every such wrapper, those made before it (in a `conftest.py`) included.

    **Returns:**

    The compiled function, with `.cache_info()`, `.cache_clear()`, `.misses`, `.explain()` and
    `.lower(...)`.

    !!! example

        ```python
        import equinox as eqx
        import jax
        import jax.numpy as jnp
        import eqxstable as es

        @es.filter_jit
        def loss(model, x):
            return jnp.mean(jax.vmap(model)(x) ** 2)

        for seed in range(3):  # The model, its lambda included, is rebuilt every time.
            model = eqx.nn.MLP(2, 1, 8, 1, activation=lambda z: z / 2, key=jax.random.key(seed))
            loss(model, jnp.ones((4, 2)))
        loss(model, jnp.ones((8, 2)))  # A new batch size: a miss.
        assert loss.cache_info()[:2] == (2, 2)  # (hits, misses)
        print(loss.explain())
        ```

    !!! info

        Calls are dispatched asynchronously, as with `jax.jit`: errors raised with
        `equinox.error_if` surface when the result is used or blocked on.
    """
    if donate not in DONATE_MODES:
        raise ValueError(_MSG_BAD_DONATE.format(donate=donate))
    if on_recompile not in ("ignore", "warn", "raise"):
        raise ValueError(_MSG_BAD_ON_RECOMPILE.format(value=on_recompile))
    if max_traces is not None and (
        type(max_traces) is not int or max_traces < 1  # pyright: ignore[reportUnnecessaryComparison]
    ):
        raise ValueError(_MSG_BAD_MAX_TRACES.format(value=max_traces))
    for name in _FORBIDDEN_JITKWARGS:
        if name in jitkwargs:
            raise ValueError(_MSG_BAD_JITKWARGS.format(name=name))
    if fun is None:
        return ft.partial(
            filter_jit,
            donate=donate,
            max_traces=max_traces,
            on_recompile=on_recompile,
            verify=verify,
            **jitkwargs,
        )
    if not callable(fun):
        raise TypeError(_MSG_NOT_CALLABLE.format(type=type(fun).__name__, value=_short(fun)))
    return make_wrapper(fun, donate, max_traces, on_recompile, jitkwargs, verify)


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        return "object"
    return f"`{text}`" if len(text) <= 40 else f"`{text[:37]}...`"
