"""The callable that [`eqxstable.filter_jit`][] returns: its hit path, `.lower()`, its counters,
and its life as a pytree (its leaves are the function's arrays, as with `equinox.filter_jit`)."""

import copy
import dataclasses
import functools as ft
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TYPE_CHECKING, TypeVar

import equinox as eqx
import jax
import jax.tree_util as jtu
from typing_extensions import ParamSpec

from . import _verify
from ._accounting import CacheInfo, Call, current, live_wrappers, Miss, settle
from ._deleted import deleted_error
from ._lowered import Lowered, lowered_miss
from ._lru import sizes
from ._outputs import Mixed, rebuilt
from ._program import Program
from ._reuse import detached, detached_token, slow_call, traced_program
from ._runtime_error import equinox_error
from ._state import _Aux, _State, new_state
from ._token import Detach, Guest, real_token, Split


# `jtu.tree_flatten` is a Python wrapper around this; calling it directly saves its frame.
_flatten = jtu.default_registry.flatten
_P = ParamSpec("_P")
_T = TypeVar("_T")


MSG_SPLIT_CHANGED = (
    "`eqxstable.filter_jit`: the function `{name}` that this wrapper is a copy of was changed in "
    "place (`object.__setattr__`) after it was wrapped, so this copy's arrays and static parts no "
    "longer match it. Wrap the changed function again: `es.filter_jit({name})`."
)


class _FunKey(NamedTuple):
    """The key of one of a wrapper's leaves: its path inside the wrapped function."""

    path: tuple

    def __str__(self) -> str:
        return ".__wrapped__" + jtu.keystr(self.path)


@dataclasses.dataclass(frozen=True, eq=False, repr=False, init=False)
class _JitWrapper(Generic[_P, _T]):
    """The callable returned by [`eqxstable.filter_jit`][].

    As `equinox.filter_jit`'s wrapper, it is a pytree whose leaves are the arrays of the wrapped
    function (gradients reach a jitted module's weights), and those arrays are passed to the
    compiled program as arguments, never baked into it. For `stable_key` it is a frozen
    dataclass of its node data and those arrays; the compiled programs and the counters live in
    slots, which are part of neither, so a wrapper used as a static value never looks mutated.
    """

    __slots__ = ("_state", "_stats", "_fun", "__dict__", "__weakref__")

    _aux: _Aux
    _dynamic: tuple

    if TYPE_CHECKING:
        # Copied from the function as `functools.update_wrapper` does.
        __name__: str
        __qualname__: str

    def __init__(self, fun: Any, state: _State):
        """Private: use [`eqxstable.filter_jit`][]."""
        self._set(state, state.parts.dynamic)
        object.__setattr__(self, "_fun", fun)

    def _set(self, state: _State, dynamic: tuple) -> None:
        init = ft.partial(object.__setattr__, self)
        init("_aux", state.aux)
        init("_dynamic", dynamic)
        init("_state", state)
        init("_stats", state.stats)
        self.__dict__.update(state.names)

    def _resync(self) -> None:
        """Takes the function's parts again after `_State.resplit`: the wrapper made from the
        function does; a pytree copy, which holds other arrays, cannot."""
        state = self._state
        if getattr(self, "_fun", None) is not state.fun:
            raise TypeError(MSG_SPLIT_CHANGED.format(name=state.program.qualname))
        self._set(state, state.parts.dynamic)

    @classmethod
    def _copy(cls, state: _State, dynamic: tuple) -> "_JitWrapper":
        """A wrapper of the same function with these leaves (its unflattening), sharing `state`."""
        new = object.__new__(cls)
        new._set(state, dynamic)
        return new

    @property
    def __wrapped__(self) -> Callable[_P, _T]:
        """The wrapped function (rebuilt with this wrapper's leaves)."""
        try:
            return self._fun
        except AttributeError:
            fun = self._state.parts.rebuild(self._dynamic)
            object.__setattr__(self, "_fun", fun)
            return fun

    @property
    def fun(self) -> Callable[_P, _T]:
        return self.__wrapped__

    @property
    def donate(self) -> str:
        return self._aux.donate

    @property
    def max_traces(self) -> int | None:
        return self._aux.max_traces

    @property
    def on_recompile(self) -> str:
        return self._aux.on_recompile

    @property
    def jitkwargs(self) -> tuple:
        return self._aux.jitkwargs

    @property
    def verify(self) -> bool | None:
        return self._aux.verify

    @property
    def _fun_template(self) -> tuple:
        # What verify mode rebuilds the function from.
        return self._state.parts.template

    def _array_paths(self) -> list[tuple[tuple, Any]]:
        """`(path inside the function, array)` for each of the function's arrays."""
        keyed, _ = _flatten_wrapper_with_keys(self)
        return [(key.path, x) for key, x in keyed]

    @property
    def _program(self) -> Program:
        return self._state.program

    @property
    def name(self) -> str:
        return self._state.program.qualname

    def __call__(self, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        __tracebackhide__ = True
        state = self._state
        # `equinox.error_if` records, when traced, the stack up to the frame that holds this
        # local: an error's stack inside the jitted function.
        __equinox_jit_id__ = state.jit_id
        program = state.program
        # The function's own watch, checked here rather than through `refresh` (one frame less
        # on every call); `refresh` handles whatever it finds.
        if state.watching and (state.rebound is not None or not state.fun_watch.valid()):
            program = state.refresh()
            if self._aux is not state.aux:
                self._resync()
        if kwargs:
            args, kwargs = program.bind(args, kwargs)
        leaves, treedef = _flatten((args, kwargs), None)
        entry = program.cache.lookup(leaves, treedef, state.parts)
        donated, kept = entry.take(leaves)
        token = entry.token
        call = Call(program, self, args, kwargs, entry, False)
        previous = current.call
        current.call = call
        try:
            if token is None or state.filter_warning:
                out = slow_call(program, call, entry, donated, kept, self._dynamic, state)
            else:
                try:
                    out = token.jitted(donated, kept, self._dynamic, token)
                except Detach as refused:
                    out = detached(program, call, entry, donated, kept, self._dynamic, refused)
            if type(out) is Mixed:
                # An output with non-array leaves, rebuilt here rather than inside JAX's
                # unflattening, which keeps JAX's hits on its C++ fast path (`_outputs.py`).
                out = rebuilt(out)
            if call.committed or call.loaded is not None:
                settle(call)
            if call.committed and token is not None:
                state.traced(program)
                token = real_token(entry.token, donated, kept, self._dynamic)
                traced_program(program, entry, token, state.parts, donated, kept, self._dynamic)
            elif call.committed:
                state.traced(program)
            if program.waits and entry in program.waits:
                # A program that can raise while it runs (an `equinox.error_if` check) is
                # waited for, as `equinox.filter_jit` waits for every call, so that its error
                # is raised here rather than wherever the result is first used.
                jax.block_until_ready(out)
            if call.committed:
                # `maxsize` bounds the programs of one entry too (one per input types).
                program.cache.bound(entry)
        except BaseException as e:
            error = equinox_error(e, __equinox_jit_id__)
            # A call that failed before its miss was recorded (an error while tracing, or a
            # guard that refused to recompile) did not happen as far as the counters go; one
            # whose program ran and raised (an `equinox.error_if` check) did, hit or miss.
            if call.committed or error is not None:
                self._stats.calls += 1
            if error is None:
                # An array an earlier call donated: named, with the fix (looked for only now).
                name = state.program.qualname
                error = deleted_error(e, name, args, kwargs, self._array_paths())
                if error is None:
                    raise
        else:
            self._stats.calls += 1
            verifying = state.verifying
            if (verifying or (verifying is None and _verify.ON)) and _verify.served():
                # The very arguments of the call (a tuple), so that JAX's trace cache serves the
                # recorded jaxpr without running the function again.
                dynamic: Any = self._dynamic
                if call.committed:
                    _verify.record(program, entry, donated, kept, dynamic, out, self._fun_template)
                else:
                    _verify.check(program, self, entry, donated, kept, dynamic, out)
                    # The check traced the function: what it changed in itself then is part of
                    # the program too, as after any trace.
                    program.cache.rekey(entry)
                    state.traced(program)
            return out
        finally:
            current.call = previous
        # Raised here rather than inside `except`, so that neither JAX's long error nor the
        # frames it passed through are attached: what is left is the user's own stack.
        raise error from None

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        del owner
        if instance is None:
            return self
        # An `equinox.Partial` is a pytree, so a bound method passed on to another transform
        # keeps the module's arrays traced, as with `equinox.filter_jit`.
        return eqx.Partial(self, instance)

    def lower(self, /, *args, **kwargs) -> Lowered:
        """Lowers the function for these arguments, as `jax.jit(...).lower`.

        **Returns:** a `Lowered` with `.as_text()` and `.compile()`; the compiled program is
        called with arguments of the same structure and static values.
        """
        state = self._state
        program = state.refresh() if state.watching else state.program
        if kwargs:
            args, kwargs = program.bind(args, kwargs)
        leaves, treedef = _flatten((args, kwargs), None)
        entry = program.cache.lookup(leaves, treedef, state.parts)
        donated, kept = entry.split(leaves)
        token = entry.token
        if token is None or type(token) is Guest:
            # `.lower()` traces the entry's own objects: a guest takes a token of its own, and
            # its calls keep running its target's program for the input types it matched.
            token = detached_token(program, entry, keeps=True)
        elif type(token) is Split:
            token = token.own
        previous = current.call
        current.call = call = Call(program, self, args, kwargs, entry, True)
        # A trace `.lower()` makes is a miss like a call's (counted, guarded by `max_traces`, as
        # `equinox.debug.assert_max_traces` counts it); one JAX's trace cache serves is none.
        call.aot = True
        call.notify = False
        try:
            try:
                lowered = token.jitted.lower(donated, kept, self._dynamic, token)
            except Detach as refused:
                token = detached_token(program, entry, refused.keeps)
                lowered = token.jitted.lower(donated, kept, self._dynamic, token)
        finally:
            current.call = previous
        if call.committed and call.miss is not None:
            lowered_miss(call, program, entry)
        # Lowering traced the function: what it changed in itself then is not a later change.
        state.resnapshot()
        program.cache.rekey(entry)
        # A program that calls Python while it runs serves only these objects (`_pinned.py`).
        traced_program(program, entry, token, state.parts, donated, kept, self._dynamic)
        return Lowered(lowered, self, entry, call.committed)

    def cache_info(self) -> CacheInfo:
        """The wrapper's counters, in the shape of `functools.lru_cache`'s:
        `CacheInfo(hits, misses, maxsize, currsize, compile_seconds, trace_seconds, traces,
        compiles, loaded)`."""
        stats = self._stats
        misses = stats.missed
        return CacheInfo(
            hits=stats.calls - misses,
            misses=misses,
            maxsize=sizes.entries,
            currsize=self._state.program.cache.currsize,
            compile_seconds=stats.compile_seconds,
            trace_seconds=stats.trace_seconds,
            traces=misses,
            compiles=misses - stats.reused - stats.loaded - stats.uncompiled + stats.late,
            loaded=stats.loaded,
        )

    def cache_clear(self) -> None:
        """Drops the compiled programs and resets the counters."""
        self._state.program.clear()
        self._stats.clear()

    @property
    def misses(self) -> tuple[Miss, ...]:
        """One [`eqxstable.Miss`][] per miss, in order (the latest 4096 of them; see
        `eqxstable/_jit/_lru.py`)."""
        return tuple(self._stats.misses)

    def explain(self) -> str:
        """Every miss so far, one numbered paragraph each."""
        info = self.cache_info()
        counts = [
            _count(info.hits + info.misses, "call", "calls"),
            _count(info.hits, "hit", "hits"),
            _count(info.misses, "miss", "misses"),
        ]
        lines = [f"`{self.name}`: {', '.join(counts)}."]
        first = self._stats.missed - len(self._stats.misses) + 1
        for i, miss in enumerate(self._stats.misses, first):
            where = f" at `{miss.path}`" if miss.path else ""
            lines.append(f"  {i}. {miss.kind}{where}: {miss.reason}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<stable filter_jit of {self.name}>"

    def __copy__(self) -> "_JitWrapper[_P, _T]":
        # The same jitted function, as after a pytree round trip: the counters are shared.
        return _JitWrapper._copy(self._state, self._dynamic)

    def __deepcopy__(self, memo: dict) -> "_JitWrapper[_P, _T]":
        # A new wrapper of a copy of the function, with counters of its own; the compiled
        # programs are found again by key, so the copy does not recompile.
        return make_wrapper(copy.deepcopy(self.__wrapped__, memo), *_options_of(self))

    def __reduce__(self) -> tuple:
        return (_unpickle, (self.__wrapped__, *_options_of(self)))


def _options_of(wrapper: _JitWrapper) -> tuple:
    aux = wrapper._aux
    return (aux.donate, aux.max_traces, aux.on_recompile, dict(aux.jitkwargs), aux.verify)


def _unpickle(
    fun: Any, donate: str, max_traces: Any, on_recompile: str, jitkwargs: dict, verify: Any
) -> Any:
    return make_wrapper(fun, donate, max_traces, on_recompile, jitkwargs, verify)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def make_wrapper(
    fun: Any,
    donate: str,
    max_traces: int | None,
    on_recompile: str,
    jitkwargs: dict[str, Any],
    verify: bool | None = None,
) -> _JitWrapper:
    """The wrapper of `fun` with these (already checked) options."""
    wrapper = _JitWrapper(fun, new_state(fun, donate, max_traces, on_recompile, jitkwargs, verify))
    live_wrappers.add(wrapper)
    return wrapper


def _flatten_wrapper(wrapper: _JitWrapper) -> tuple[tuple, _Aux]:
    return wrapper._dynamic, wrapper._aux


def _flatten_wrapper_with_keys(wrapper: _JitWrapper) -> tuple[list, _Aux]:
    state = wrapper._state
    keys = state.keys
    if keys is None:
        # The paths of the original function's leaves: a copy may hold anything as leaves.
        paths = [p for p, _ in jtu.tree_flatten_with_path(state.fun)[0]]
        keys = state.keys = [_FunKey(tuple(p)) for p, m in zip(paths, state.parts.mask) if m]
    return list(zip(keys, wrapper._dynamic)), wrapper._aux


def _unflatten_wrapper(aux: _Aux, dynamic: Any) -> _JitWrapper:
    return _JitWrapper._copy(aux.state, tuple(dynamic))


jtu.register_pytree_with_keys(
    _JitWrapper, _flatten_wrapper_with_keys, _unflatten_wrapper, _flatten_wrapper
)
