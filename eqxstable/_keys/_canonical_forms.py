"""Keys of the static lists, dicts, sets and NumPy arrays that `eqxstable.stabilize` stores in a
plain module (`K-canonical-form`): by their equivalence class, while they hold what they were
made with."""

from typing import Any

import numpy as np

from ._arrays import ndarray_subclass
from ._context import Ctx
from ._mutable import mutable
from ._state import unreadable
from ._types import Identity


def canonical_form(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """`K-canonical-form`: a form of `_module/_canonical.py` (told by a flag of its own class:
    this layer does not import the module layer). One object per module, of one class (a
    token) with every equal one: keyed by that class, while it holds what it was made with
    (watched: a write past its read-only methods, by C code, is a change). Changed since: a key
    equal to nothing (`K-opaque`); one not made by `freeze`: as any other subclass
    (`K-mutable`)."""
    token = obj.eqxstable_class()
    if token is None:
        return (ndarray_subclass if isinstance(obj, np.ndarray) else mutable)(obj, ctx, content_ok)
    if token is False:
        return unreadable(obj, ctx)
    # Never substituted by `intern` (`ctx.own_eq`, as a partial): its equal twin is another
    # module's object, which C code may change apart. Equal keys still share a program under
    # `es.filter_jit`, whose watch of each object sees such a change and traces again.
    ctx.own_eq = True
    ctx.states.append((obj, canonical_state, (token,)))
    return ("canonical-form", Identity(token))


def canonical_state(obj: Any) -> tuple:
    """What the watch of a canonical form compares: its token while it is as made."""
    return (obj.eqxstable_class(),)
