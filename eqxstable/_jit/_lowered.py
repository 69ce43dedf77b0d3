"""What [`eqxstable.filter_jit`][]`(f).lower(...)` returns, and its `.compile()`."""

from typing import Any

import jax.tree_util as jtu

from ._accounting import Call, current, not_compiled, notify
from ._outputs import rebuilt, serving


_flatten = jtu.default_registry.flatten

_MSG_LOWERED_MISMATCH = (
    "`{name}.lower(...).compile()` was called with arguments whose static parts or structure "
    "differ from those it was lowered with; lower it again for these arguments."
)


class Lowered:
    """What [`eqxstable.filter_jit`][]`(f).lower(...)` returns: `.as_text()` and `.compile()`."""

    def __init__(self, lowered: Any, wrapper: Any, entry: Any, traced: bool = False):
        self.lowered = lowered
        self._wrapper = wrapper
        self._entry = entry
        # Whether `.lower()` traced (a miss): its first `.compile()` is that trace's compile.
        self._traced = traced

    def as_text(self, *args, **kwargs) -> str:
        return self.lowered.as_text(*args, **kwargs)

    def compile(self, compiler_options: dict[str, str | bool] | None = None) -> "Compiled":
        wrapper = self._wrapper
        program = wrapper._state.program
        # Lowering calls so that the listener hears only this compile's event (`Call.aot`).
        call = Call(program, wrapper, (), {}, self._entry, True)
        call.aot = call.miss_decided = True
        call.notify = False
        previous = current.call
        current.call = call
        try:
            compiled = self.lowered.compile(compiler_options=compiler_options)
        finally:
            current.call = previous
        if self._traced and compiler_options is None:
            # Without options JAX keeps the executable with the lowering, which the wrapper's
            # calls share: the first call after it runs this program, compiling nothing. So
            # this is the one compile of the trace `.lower()` made (`CacheInfo.compiles`),
            # counted when JAX's compile event says XLA compiled here: where a call compiled
            # the trace first, JAX returned that executable and the call counted it.
            self._traced = False
            if call.compiled:
                stats = wrapper._stats
                stats.late += 1
                stats.compile_seconds += call.compile_seconds
                program.traced_abstract.discard(self._entry)
        # With compiler options it is a program of its own, outside the wrapper's cache (its
        # calls run JAX's program for the same trace, compiled without them, which the first
        # call counts): not one of `compiles`, so that `compiles <= traces` holds.
        return Compiled(compiled, wrapper, self._entry)


class Compiled:
    """A compiled program for one set of static arguments; call it like the function."""

    def __init__(self, compiled: Any, wrapper: Any, entry: Any):
        self.compiled = compiled
        self._wrapper = wrapper
        self._entry = entry

    def __call__(self, *args, **kwargs):
        wrapper = self._wrapper
        program = wrapper._state.program
        if kwargs:
            args, kwargs = program.bind(args, kwargs)
        leaves, treedef = _flatten((args, kwargs), None)
        if program.cache.lookup(leaves, treedef, wrapper._state.parts) is not self._entry:
            raise TypeError(_MSG_LOWERED_MISMATCH.format(name=wrapper.name))
        donated, kept = self._entry.split(leaves)
        # An output leaf the trace took from the inputs is this call's own object (`_outputs.py`).
        with serving(self._entry, wrapper._fun_template):
            return rebuilt(self.compiled(donated, kept, wrapper._dynamic))

    def as_text(self) -> str:
        return self.compiled.as_text()


def lowered_miss(call: Call, program: Any, entry: Any) -> None:
    """After a `.lower()` whose trace was a miss: one call that compiled nothing (the listener
    ignored the lowering). The first call of the entry at the top level compiles that trace
    without tracing again, which is no miss (`Program.traced_abstract`)."""
    assert call.miss is not None
    stats = call.stats
    stats.calls += 1
    stats.uncompiled += 1
    call.amend(not_compiled(call.miss, 0.0, "lowered"))
    program.traced_abstract.add(entry)
    notify(call.wrapper, call.miss)
