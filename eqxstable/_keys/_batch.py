"""A run of plain objects' states checked as one on the hit path (attack 9a-03).

A function closing over a list of 40,000 plain records (`K-mutable`, one `_state.object_state`
each) was checked on every jitted call by one Python call per record, building a tuple each
(~3 us a record: 120 ms a hit). A `Batch` checks the same states with C iterators over all of
them at once: each object's class, whether its `__dict__` is still an exact `dict`, its number of
attributes, and its attribute names and values, all by `is` as before (sizes, plain `int`s, by
`==`). It passes exactly when each of its objects' own state would: an object's names and values
line up with what it held because its size does. Only the states of objects whose class has no
slots and whose `__dict__` was an exact `dict` when keyed are batched (the state of such an object
is its class, size, names and values: `object_state`'s layout then); a weak watch (the memo's)
holds the states one by one, as before (`Watch.weak`).
"""

import operator
from itertools import chain, repeat
from typing import Any

from ._state import object_state, slots_of
from ._watch import Batch


# Fewer states than this are checked one by one: a batch only pays for itself over many.
_LEAST = 32
_is = operator.is_
_dict_of = operator.attrgetter("__dict__")


def objects_state(batch: Batch) -> tuple:
    """`(batch,)` while every object holds what it held when keyed (its state in a `Watch` is
    `(batch,)`, so the generic check compares one item); `()` once one of them changed."""
    objs = batch.objs
    try:
        # As `object_state` reads it (`getattr`), through the class's `__getattribute__`.
        dicts = list(map(_dict_of, objs))
    except Exception:
        return ()
    if (
        all(map(_is, map(type, objs), batch.types))
        and all(map(_is, map(type, dicts), repeat(dict)))
        and list(map(len, dicts)) == batch.sizes
        and all(map(_is, chain.from_iterable(dicts), batch.keys))
        and all(map(_is, chain.from_iterable(map(dict.values, dicts)), batch.values))
    ):
        return (batch,)
    return ()


def batched(states: tuple) -> tuple:
    """`states` with the states of plain objects (at least `_LEAST` of them) as one `Batch`."""
    plain = [s for s in states if s[1] is object_state]
    if len(plain) < _LEAST:
        return states
    plain = [s for s in plain if _plain(s)]
    if len(plain) < _LEAST:
        return states
    taken = {id(s) for s in plain}
    rest = [s for s in states if id(s) not in taken]
    keys: list = []
    values: list = []
    for _, _, state in plain:
        n = state[1]
        keys.extend(state[2 : 2 + n])
        values.extend(state[2 + n :])
    batch = Batch(
        tuple(s[0] for s in plain),
        tuple(s[2][0] for s in plain),
        [s[2][1] for s in plain],
        tuple(keys),
        tuple(values),
        tuple(plain),
    )
    return (*rest, (batch, objects_state, (batch,)))


def _plain(s: tuple) -> bool:
    # An object whose `object_state` is `(class, size, *names, *values)`: no slots, an exact
    # `dict` for `__dict__` (a subclass's `keys()` may say otherwise than `dict.keys`).
    obj, _, state = s
    t = state[0]
    if type(obj) is not t or slots_of(t):
        return False
    try:
        d: Any = obj.__dict__
    except Exception:
        return False
    return type(d) is dict and len(state) == 2 + 2 * state[1]
