"""A call given an array whose buffer is gone (donated to an earlier call, or deleted) raises an
error that names the call, the leaf and the fix, instead of XLA's "Invalid buffer passed to
Execute()", which names neither.

Looked for only once the call raised, so the hit path pays nothing: a donated array is deleted
when the call that donated it runs, and any later use of it fails inside JAX.
"""

from typing import Any

import jax
import jax.tree_util as jtu
from jax.core import Tracer

from ._signature import argument_path


MSG_DELETED = (
    "`eqxstable.filter_jit`: `{name}` was called with {what} whose buffer was deleted: "
    "{paths}. An array passed to a call that donates it (`donate='all'`, "
    "`'all-except-first'` or `'warn'`) is deleted once that call runs. Pass the call's result, "
    "or a copy made before the donating call (`x.copy()`), instead of the donated array; or "
    "wrap the function with `donate='none'`."
)


def _deleted(x: Any) -> bool:
    if not isinstance(x, jax.Array) or isinstance(x, Tracer):
        return False
    try:
        return bool(x.is_deleted())
    except Exception:
        return False


def deleted_error(
    error: BaseException, name: str, args: tuple, kwargs: dict, fun_arrays: list
) -> Exception | None:
    """The error to raise instead of `error` when the call was given a deleted array, else `None`.

    **Arguments:**

    - `error`: what the call raised (kept only when it speaks of a deleted or donated buffer,
        so that an error of the user's own is never replaced).
    - `name`: the jitted function's name.
    - `args`, `kwargs`: the call's bound arguments.
    - `fun_arrays`: `(path inside the function, array)` for each of the function's arrays.

    **Returns:**

    A `ValueError` naming every deleted leaf (`args[0]`, `kwargs['x']`,
    `args[0].layers[1].weight`, `fun.weight`), or `None`.
    """
    text = str(error)
    if not isinstance(error, Exception) or ("deleted" not in text and "donated" not in text):
        return None
    try:
        leaves = jtu.tree_flatten_with_path((args, kwargs))[0]
        paths = [argument_path(path) for path, x in leaves if _deleted(x)]
        paths += ["fun" + jtu.keystr(tuple(path)) for path, x in fun_arrays if _deleted(x)]
    except Exception:
        return None
    if not paths:
        return None
    what = "an array" if len(paths) == 1 else "arrays"
    return ValueError(
        MSG_DELETED.format(name=name, what=what, paths=", ".join(f"`{p}`" for p in paths))
    )
