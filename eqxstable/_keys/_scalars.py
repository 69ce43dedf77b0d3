"""`K-scalar-run`: the fast path for a container whose items are all of one exact scalar type.

A vocabulary, a list of indices or a table of settings holds thousands of `str`, `int` or
`float` objects; keying each through the dispatcher costs a Python call per item (seconds per
million). When every item has exactly the same type, and that type's own `==` is exact between
two objects of it, the items as one tuple are their key, compared and hashed by the tuple at C
speed; floats, whose `==` is not exact (`0.0 == -0.0`, a NaN is unequal to itself), are keyed by
their IEEE bytes. The answer is the slow path's: two runs have equal keys exactly when the slow
path, item by item (`(type, value)`, a float by its bits), gives equal keys
(`tests/test_keys_cost_big.py` checks it against the slow path with hypothesis).

Anything else (a mix of types, a subclass of `str`, a `bool` among `int`s, a short container)
takes the slow path, item by item.
"""

from array import array
from itertools import repeat
from operator import is_
from typing import Any

from ._per_class import type_ids


# Exact types whose `==` between two objects of that very type holds exactly when they are the
# same value: `int` (not `bool`: a run of `bool`s is its own type here), `str`, `bytes`, `bool`
# and `None`. A subclass could define any `==`: never here.
# By identity (`type_ids`): a user's metaclass may call its class equal to `int`.
_EXACT_EQ = type_ids((int, str, bytes, bool, type(None)))
_FLOAT = id(float)
# Shorter containers take the slow path: it costs little there, and the type scan would not pay.
MIN_ITEMS = 8
# Whether the fast path is taken at all (the property tests compare it with the slow path).
ENABLED = True


def scalar_run(items: Any, ctx: Any) -> Any:
    """The key of `items` (a tuple, list, set, or a dict's keys or values) if all of them are of
    one exact type on the list above, or all exactly `float`; else `None` (take the slow path).

    **Arguments:**

    - `items`: a sized iterable, read twice (it is not changed in between: no user code runs).
    - `ctx`: the key's computation: a run holding a NaN is never substituted (`ctx.own_eq`), as
        the slow path's `float_` says.

    **Returns:**

    `("scalars", type, items as a tuple)`, `("scalars", float, their bytes as C doubles)`, or
    `None`.
    """
    if not ENABLED or len(items) < MIN_ITEMS:
        return None
    t = type(next(iter(items)))
    i = id(t)
    if i not in _EXACT_EQ and i != _FLOAT:
        return None
    # Every item's type is `t` itself, compared by `is` in C (a few nanoseconds an item, and it
    # stops at the first other type): a set of the types would hash and compare them with their
    # metaclass's `__hash__`/`__eq__`, which may call a user's class `int`.
    if not all(map(is_, map(type, items), repeat(t))):
        return None
    if i in _EXACT_EQ:
        return ("scalars", t, tuple(items))
    if i == _FLOAT:
        # `array('d')` stores each float's 8 bytes as they are: `-0.0` and `0.0` differ, and a
        # NaN keeps its payload, as `struct.pack("<d", x)` (the slow path) does.
        if not all(map(float.__eq__, items, items)):
            ctx.own_eq = True
        return ("scalars", float, array("d", items).tobytes())
    return None
