"""What [`eqxstable.filter_jit`][]`(f).lower(...)` returns, and its `.compile()`."""

from typing import Any

import jax.tree_util as jtu

from ._outputs import serving


_flatten = jtu.default_registry.flatten

_MSG_LOWERED_MISMATCH = (
    "`{name}.lower(...).compile()` was called with arguments whose static parts or structure "
    "differ from those it was lowered with; lower it again for these arguments."
)


class Lowered:
    """What [`eqxstable.filter_jit`][]`(f).lower(...)` returns: `.as_text()` and `.compile()`."""

    def __init__(self, lowered: Any, wrapper: Any, entry: Any):
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
            return self.compiled(donated, kept, wrapper._dynamic)

    def as_text(self) -> str:
        return self.compiled.as_text()
