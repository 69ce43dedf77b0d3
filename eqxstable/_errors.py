"""The errors and warnings that eqxstable raises."""


class RegistryError(KeyError):
    """Raised by [`eqxstable.register`][] and [`eqxstable.lookup`][]: a name is taken by a
    callable that is not equivalent, or a name is unknown."""

    def __str__(self) -> str:
        # `KeyError.__str__` quotes its argument as a repr; our messages are sentences.
        return str(self.args[0]) if self.args else ""


class RecompileError(RuntimeError):
    """Raised by a stable [`eqxstable.filter_jit`][] that traces more often than it is allowed to
    (`max_traces=...`, `on_recompile="raise"`, or inside [`eqxstable.no_recompiles`][])."""


class RecompileWarning(UserWarning):
    """Emitted by a stable [`eqxstable.filter_jit`][] with `on_recompile="warn"` for each miss after
    the first."""


class StabilityWarning(UserWarning):
    """Emitted when eqxstable meets a value whose key cannot be trusted, e.g. a class that defines
    `__hash__` but not `__eq__`, so that it falls back to identity."""
