"""The keys a computation falls back to where it cannot key an object by what it holds: this
very object (`identity`), or a key equal to nothing, not even the same object's next key
(`too_deep`, and `equal_to_nothing`, `_context.top`'s key for an object past the object budget,
tagged `TOO_MANY`), watched as always changed. Never a wrong answer, never a crash: at worst
every call traces.
"""

from typing import Any, TYPE_CHECKING

from ._types import Identity


if TYPE_CHECKING:
    from ._context import Ctx


# The tag of a key past the object budget (`_context.MAX_OBJECTS`), which the jit layer reads to
# say why a call traces.
TOO_MANY = "too-many-objects"


def identity(obj: Any, ctx: "Ctx") -> Identity:
    """This very object: the safe fallback, equal to nothing else."""
    ctx.identity = True
    return Identity(obj)


def too_deep(obj: Any, ctx: "Ctx") -> Any:
    """Nested too deeply to key or watch: a key equal to nothing, not even this object's next
    key, so every call recompiles. Never a wrong answer, never a crash."""
    ctx.identity = True
    ctx.states.append((obj, _never, (None,)))
    return ("too-deep", Identity(_Unkeyable()))


def equal_to_nothing(obj: Any, ctx: "Ctx", reaching: str) -> Any:
    """`top`'s key for an object past the budget, watched as always changed: whatever the walk
    recorded so far is dropped. `reaching`: what the walk ran out in (`_ran_out.reaching`)."""
    ctx.states[:] = [(obj, _never, (None,))]
    ctx.names.clear()
    ctx.blobs.clear()
    ctx.identity = True
    ctx.copied_arrays = False
    return (TOO_MANY, Identity(_Unkeyable()), reaching)


def _never(obj: Any) -> tuple:
    # The state function of a key equal to nothing: `()` never is the `(None,)` saved with it.
    return ()


class _Unkeyable:
    # A fresh object per key, so that the key is equal to no other.
    __slots__ = ("__weakref__",)
