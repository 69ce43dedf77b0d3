"""The errors and warnings that eqxstable raises."""

import sys
import warnings


class RegistryError(KeyError):
    """Raised by [`eqxstable.register`][] and [`eqxstable.lookup`][]: a name is taken by a
    callable that is not equivalent, or a name is unknown."""

    def __str__(self) -> str:
        # `KeyError.__str__` quotes its argument as a repr; our messages are sentences.
        return str(self.args[0]) if self.args else ""


class RecompileError(RuntimeError):
    """Raised by a stable [`eqxstable.filter_jit`][] that traces more often than it is allowed to
    (`max_traces=...`, `on_recompile="raise"`, or inside [`eqxstable.no_recompiles`][])."""


class StaleProgramError(RuntimeError):
    """Raised in verify mode when a reused compiled program no longer matches what the call
    computes: something the trace reads changed in a way its key does not see."""


class RecompileWarning(UserWarning):
    """Emitted by a stable [`eqxstable.filter_jit`][] with `on_recompile="warn"` for each miss after
    the first."""


class StabilityWarning(UserWarning):
    """Emitted when eqxstable meets a value whose key cannot be trusted, e.g. a class that defines
    `__hash__` but not `__eq__`, so that it falls back to identity."""


MSG_HASH_WITHOUT_EQ = (
    "`eqxstable.stable_key`: class `{cls}` defines `__hash__` but not `__eq__`, so its instances "
    "can only be compared by identity and a rebuilt one always recompiles. Define `__eq__` "
    "consistently with `__hash__` (or make it a frozen dataclass)."
)


def user_stacklevel() -> int:
    """The `stacklevel` that points a warning at the first frame outside eqxstable (and outside
    the libraries eqxstable calls back through), i.e. at the user's own line."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_INTERNAL):
        frame = frame.f_back
        level += 1
    return level


_INTERNAL = ("eqxstable.", "equinox.", "jax.", "jax._src")


def warn(message: str, category: type[Warning]) -> None:
    """`warnings.warn`, pointed at the user's line."""
    warnings.warn(message, category, stacklevel=user_stacklevel())
