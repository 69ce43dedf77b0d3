"""Tuples of frozen records past the object budget (`K-too-deep`): an exact `tuple` or `frozenset`
holding, all the way down through exact tuples and frozensets, only immutable scalars and plain
frozen dataclass records whose fields hold such scalars (a lookup table of 200,000 `Rec(a, b,
c)`). Walking it would run out of the budget, so it is keyed by its **identity** (held: a tuple
takes no weak reference, and its `id` cannot be reused while the key lives), by the keys of the
records' classes (walked as any class is: their namespaces watched) and by what each record
holds, by `is` (`_Held`): its class, its `__dict__`, its names and values. The watch is one state
of all of them, read in C (`records_state`): a record written past its frozen `__setattr__`
(`object.__setattr__(r, "b", 9.0)`, `r.__dict__["b"] = 9.0`, `r.__class__ = Other`) is seen on
the next call, and its new key differs. A tuple itself cannot change; nothing else in it can.
"""

import operator
from itertools import chain, islice
from typing import Any

from ._context import _CLASS_HANDLERS, _handler, Ctx, HANDLERS, key, TOO_MANY, top
from ._frozen import _ATOMS, _FROZEN, _Held, frozen_scalars
from ._origin import library_class
from ._state import attrs_state, hidden_state, protocol_plain, slots_of
from ._types import Identity
from ._watch import size, Watch


_is = operator.is_
_dict_of = operator.attrgetter("__dict__")


def _record_class(t: type) -> bool:
    """Whether instances of `t` are plain frozen records: keyed by `frozen_dataclass`
    (`K-frozen-dataclass`), a user's class (a library's module may own dicts), its fields in
    an exact `__dict__` read through `type`'s own protocol, no slots, no hidden C state."""
    handler = HANDLERS.get(id(t)) or _CLASS_HANDLERS.get(id(t)) or _handler(t)
    return (
        getattr(handler, "frozen_record", False)
        and not library_class(t)
        and not slots_of(t)
        and not hidden_state(t)
        and protocol_plain(t)
    )


def frozen_records(obj: Any) -> list | None:
    """The records `obj` holds, in order, where it is an exact tuple or frozenset of what the
    module docstring says (at least one record); else `None`. One level at a time, the types
    of a level scanned in C."""
    if id(type(obj)) not in _FROZEN:
        return None
    records: list = []
    seen = {id(obj)}
    level = [obj]
    checked: dict[int, bool] = {}
    while level:
        items = list(chain.from_iterable(level))
        types = {id(t): t for t in map(type, items)}
        inner: list = []
        kinds: set[int] = set()
        for i, t in types.items():
            if i in _ATOMS:
                continue
            if i in _FROZEN:
                inner.extend(y for y in items if type(y) is t and id(y) not in seen)
                continue
            ok = checked.get(i)
            if ok is None:
                ok = checked[i] = _record_class(t)
            if not ok:
                return None
            kinds.add(i)
        if kinds:
            # Most levels hold records of one class alone: taken whole, no loop in Python.
            here = items if len(types) == 1 else [y for y in items if id(type(y)) in kinds]
            if not _plain_values(here):
                return None
            records.extend(here)
        seen.update(map(id, inner))
        level = inner
    return records or None


def _plain_values(records: list) -> bool:
    # Each record's `__dict__` exactly a dict whose values are immutable scalars, or exact
    # tuples and frozensets of them (`frozen_scalars`): nothing a record holds can change.
    dicts = list(map(_dict_of, records))
    if set(map(type, dicts)) != {dict}:
        return False
    values = list(chain.from_iterable(map(dict.values, dicts)))
    types = set(map(id, map(type, values)))
    if types <= _ATOMS:
        return True
    if not types <= _ATOMS | _FROZEN:
        return False
    return all(frozen_scalars(v) for v in values if id(type(v)) in _FROZEN)


class Records:
    """The records of one tuple and the classes they had when keyed, held for `records_state`
    (strongly: no weak reference, the memo's weak watch keeps it as it is)."""

    __slots__ = ("records", "types")

    def __init__(self, records: list):
        self.records = records
        self.types = list(map(type, records))


_CHANGED = object()


def records_state(held: Records) -> tuple:
    """What the records hold now, by `is`: each one's `__dict__` size, then all the names, then
    all the values, in order (read in C), as `_state.attrs_state` of each would. A record given
    another class gives a state that matches nothing (its `__dict__` may not even be readable
    the same way). Not the `__dict__` objects themselves: one replaced by a dict holding the
    very same names and values is the same record."""
    dicts = _dicts(held)
    if dicts is None:
        return (object(),)
    lengths = list(map(len, dicts))
    if lengths and max(lengths) > 256:
        lengths = list(map(size, lengths))
    return (
        *lengths,
        *chain.from_iterable(dicts),
        *chain.from_iterable(map(dict.values, dicts)),
    )


def _dicts(held: Records) -> list | None:
    # The records' `__dict__`s, where each record has its class still (else `None`).
    records = held.records
    if not all(map(_is, map(type, records), held.types)):
        return None
    try:
        dicts = list(map(_dict_of, records))
    except Exception:
        return None
    if len(set(map(type, dicts))) != 1 or type(dicts[0]) is not dict:
        return None
    return dicts


def _records_valid(held: Records, state: tuple) -> bool:
    """`records_state(held) == state` item by item by `is`, compared where the records are,
    without building the state (the hit path: `Watch.valid` calls it as the state function's
    `valid`)."""
    dicts = _dicts(held)
    if dicts is None:
        return False
    n = len(dicts)
    # Sizes as exact ints, compared by value in C (a state's are `size`d to compare by `is`).
    if list(map(len, dicts)) != list(islice(state, n)):
        return False
    total = sum(map(len, dicts))
    if len(state) != n + 2 * total:
        return False
    return all(map(_is, chain.from_iterable(dicts), islice(state, n, n + total))) and all(
        map(_is, chain.from_iterable(map(dict.values, dicts)), islice(state, n + total, None))
    )


records_state.valid = _records_valid  # pyright: ignore[reportFunctionMemberAccess]


def records_part(obj: Any, ctx: Ctx) -> Any:
    """The key of a tuple or frozenset of frozen records that `top` chose to key by identity
    (`frozen_records`), else `None`: its identity, its records' classes keyed as classes, and
    what the records hold by `is` (watched as one state)."""
    if id(obj) not in ctx.stack.frozen:
        return None
    records = frozen_records(obj)
    if records is None:
        return None
    held = Records(records)
    state = records_state(held)
    ctx.identity = True
    ctx.states.append((held, records_state, state))
    classes = list({id(t): t for t in held.types}.values())
    class_keys = tuple([key(t, ctx, False) for t in classes])
    return (TOO_MANY, Identity(obj), _Held((*held.types, *state)), class_keys)


# The keys of the latest `MEMO_SIZE` tuples of at least `MEMO_MIN` items holding records
# (`frozen_records`), by `id`, each with the tuple itself (held: a tuple takes no weak
# reference, and its `id` is not reused while held) and the strong watch of its key: a rebuilt
# reader of the same unchanged table (a new closure per call) reuses its key while the watch
# holds rather than walking 45,000 records again (about a second a reader).
MEMO_MIN = 1024
MEMO_SIZE = 16
_memo: dict[tuple[int, bool], tuple[Any, Any, Watch, bool, bool]] = {}
# The tuples whose own walk (`recall_records`) is under way, by `id`.
_own_walks: set[int] = set()


def recall_records(obj: Any, ctx: Ctx, content_ok: bool) -> Any:
    """The key of an exact tuple of at least `MEMO_MIN` items holding frozen records, from the
    memo while its watch holds, else computed on its own (a walk from it, as `top` does) and
    remembered; spliced into this walk with its watch. `None` for any other tuple, or where its
    key numbers objects (`_DEF`, `_SEEN`, `_CUT`: numbers of its own walk, not to be spliced):
    walked here as before."""
    if len(obj) < MEMO_MIN or ctx.by_value or id(obj) in ctx.stack.frozen:
        return None
    if id(obj) in _own_walks:
        # Its own walk, below: walked there.
        return None
    slot = (id(obj), content_ok)
    entry = _memo.get(slot)
    if entry is not None and entry[0] is obj and entry[2].valid():
        _, parts, watch, identity, own_eq = entry
    else:
        records = frozen_records(obj)
        if records is None:
            return None
        own = Ctx()
        _own_walks.add(id(obj))
        try:
            parts = top(obj, own, content_ok)
        finally:
            _own_walks.discard(id(obj))
        if own.stack.done or own.stack.cut or own.copied_arrays or _unkeyable(parts):
            # Numbered, or a key equal to nothing (the walk of the reader says why): walked
            # where it is met, as before.
            return None
        _one_state(own, records)
        watch, identity, own_eq = own.watch(), own.identity, own.own_eq
        _memo.pop(slot, None)
        _memo[slot] = (obj, parts, watch, identity, own_eq)
        while len(_memo) > MEMO_SIZE:
            try:
                _memo.pop(next(iter(_memo)), None)
            except (RuntimeError, StopIteration):  # Changed by another thread meanwhile.
                break
    ctx.extend(watch)
    ctx.identity |= identity
    ctx.own_eq |= own_eq
    return parts


def _one_state(ctx: Ctx, records: list) -> None:
    """The records' own states (`_state.attrs_state`: class, size, names and values of each,
    one Python call each on every hit) as one `records_state`, which reads the same in C."""
    ids = set(map(id, records))
    states = [s for s in ctx.states if not (s[1] is attrs_state and id(s[0]) in ids)]
    if len(states) == len(ctx.states):
        return
    held = Records(records)
    states.append((held, records_state, records_state(held)))
    ctx.states[:] = states


def _unkeyable(parts: Any) -> bool:
    # `top`'s key equal to nothing: `(TOO_MANY, Identity(...), "what it ran out in")`.
    return (
        type(parts) is tuple and len(parts) == 3 and parts[0] == TOO_MANY and type(parts[2]) is str
    )
