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
from types import MemberDescriptorType
from typing import Any

from ._context import _CLASS_HANDLERS, _handler, Ctx, HANDLERS, key, top
from ._fallbacks import TOO_MANY
from ._frozen import _ATOMS, _FROZEN, _Held, frozen_scalars
from ._origin import library_class
from ._state import attrs_state, hidden_state, layout, protocol_plain, slots_of
from ._types import Identity
from ._watch import size, Watch


_is = operator.is_
_dict_of = operator.attrgetter("__dict__")


def _record_class(t: type) -> bool:
    """Whether instances of `t` are records (`_record_kind`)."""
    return _record_kind(t) is not None


def _record_kind(t: type) -> str | None:
    """How instances of `t` hold a record's state, where they are records: `"dict"` for plain
    frozen dataclass records (keyed by `frozen_dataclass`, `K-frozen-dataclass`: a user's class
    (a library's module may own dicts), its fields in an exact `__dict__` read through `type`'s
    own protocol, no slots, no hidden C state); `"slots"` for such records with slots and no
    `__dict__` (`slots=True`: their slots' values are their state); `"tuple"` for a user's
    NamedTuple (a tuple subclass keyed by `tuple_subclass`, adding no `__dict__`, no slots and
    nothing in C: its items, which cannot change, are all it holds). Else `None`."""
    handler = HANDLERS.get(id(t)) or _CLASS_HANDLERS.get(id(t)) or _handler(t)
    if library_class(t):
        return None
    has_dict, _, names, disagree = layout(t)
    if getattr(handler, "frozen_record", False) and not hidden_state(t) and protocol_plain(t):
        if has_dict and not names:
            return "dict"
        if names and not has_dict:
            return "slots"
        return None
    if (
        getattr(handler, "tuple_record", False)
        and issubclass(t, tuple)
        and not has_dict
        and not names
        and not disagree
        and t.__basicsize__ == tuple.__basicsize__
    ):
        return "tuple"
    return None


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
        nested: set[int] = set()
        kinds: set[int] = set()
        for i, t in types.items():
            if i in _ATOMS:
                continue
            if i in _FROZEN:
                nested.add(i)
                continue
            ok = checked.get(i)
            if ok is None:
                ok = checked[i] = _record_class(t)
            if not ok:
                return None
            kinds.add(i)
        # Each object once, however many times it is held (`t = (t, t)` twenty deep is twenty
        # tuples, not a million paths): by `id`, built in C.
        inner = _fresh(items, nested, len(types), seen)
        if kinds:
            here = _fresh(items, kinds, len(types), seen)
            for i in kinds:
                group = here if len(kinds) == 1 else [y for y in here if id(type(y)) == i]
                if group and not _plain_values(group):
                    return None
            seen.update(map(id, here))
            records.extend(here)
        seen.update(map(id, inner))
        level = inner
    return records or None


def _fresh(items: list, kinds: set[int], n_types: int, seen: set[int]) -> list:
    """The items of `items` whose types are `kinds` (of the level's `n_types`) and not in `seen`,
    each once, in order; in C where the level holds those types alone."""
    if not kinds:
        return []
    if len(kinds) != n_types:
        items = [y for y in items if id(type(y)) in kinds]
    by_id = dict(zip(map(id, items), items))
    for i in seen.intersection(by_id):
        del by_id[i]
    return list(by_id.values())


def _plain_values(records: list) -> bool:
    # What each record holds is exactly immutable scalars, or exact tuples and frozensets of
    # them (`frozen_scalars`): nothing a record holds can change. A record's `__dict__` must be
    # exactly a dict; a slot unset is no record.
    t = type(records[0])
    kind = _record_kind(t)
    if kind == "dict":
        dicts = list(map(_dict_of, records))
        if set(map(type, dicts)) != {dict}:
            return False
        values: list = list(chain.from_iterable(map(dict.values, dicts)))
    elif kind == "slots":
        try:
            values = list(chain.from_iterable(map(_slot_reader(t), records)))
        except AttributeError:
            return False
    else:
        values = list(chain.from_iterable(map(tuple.__iter__, records)))
    types = set(map(id, map(type, values)))
    if types <= _ATOMS:
        return True
    if not types <= _ATOMS | _FROZEN:
        return False
    return all(frozen_scalars(v) for v in values if id(type(v)) in _FROZEN)


def _slot_descriptors(t: type) -> list:
    # The member descriptor of each slot of `t` (`layout` checked they are there), read where
    # `type` put it: never through the instance's attribute protocol.
    found = []
    for n in slots_of(t):
        for c in t.__mro__:
            d = vars(c).get(n)
            if type(d) is MemberDescriptorType:
                found.append(d)
                break
    return found


def _slot_reader(t: type) -> Any:
    # A function of a record: its slots' values, in order, read in C.
    getters = [d.__get__ for d in _slot_descriptors(t)]
    return lambda r: [g(r) for g in getters]


class Records:
    """The records of one tuple and the classes they had when keyed, held for `records_state`
    (strongly: no weak reference, the memo's weak watch keeps it as it is): those holding a
    `__dict__` (`dicts`), and per class with slots, its slots' member descriptors and its
    records (`slots`). NamedTuples hold nothing but their classes."""

    __slots__ = ("dicts", "records", "slots", "types")

    def __init__(self, records: list):
        self.records = records
        self.types = list(map(type, records))
        kinds = {id(t): (t, _record_kind(t)) for t in self.types}
        self.dicts = [r for r in records if kinds[id(type(r))][1] == "dict"]
        self.slots = [
            (_slot_descriptors(t), [r for r in records if type(r) is t])
            for t, kind in kinds.values()
            if kind == "slots"
        ]


_CHANGED = object()


def records_state(held: Records) -> tuple:
    """What the records hold now, by `is`: each dict record's `__dict__` size, then all the
    names, then all the values, in order (read in C), as `_state.attrs_state` of each would;
    then each slot's value of each record with slots. A record given another class gives a
    state that matches nothing (its `__dict__` may not even be readable the same way). Not the
    `__dict__` objects themselves: one replaced by a dict holding the very same names and
    values is the same record."""
    dicts = _dicts(held)
    # Read only where every record has its class still (`_dicts`): a slot's descriptor reads
    # no other class's instance.
    slots = None if dicts is None else _slots(held)
    if dicts is None or slots is None:
        return (object(),)
    lengths = list(map(len, dicts))
    if lengths and max(lengths) > 256:
        lengths = list(map(size, lengths))
    return (
        *lengths,
        *chain.from_iterable(dicts),
        *chain.from_iterable(map(dict.values, dicts)),
        *slots,
    )


def _dicts(held: Records) -> list | None:
    # The dict records' `__dict__`s, where each record has its class still (else `None`).
    if not all(map(_is, map(type, held.records), held.types)):
        return None
    try:
        dicts = list(map(_dict_of, held.dicts))
    except Exception:
        return None
    if dicts and set(map(type, dicts)) != {dict}:
        return None
    return dicts


def _slots(held: Records) -> list | None:
    # The slots' values of the records with slots, in order (`None` where one is unset).
    try:
        return list(
            chain.from_iterable(
                map(d.__get__, group) for descriptors, group in held.slots for d in descriptors
            )
        )
    except (AttributeError, TypeError):
        return None


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
    end = n + 2 * total
    if len(state) != end + sum(len(d) * len(g) for d, g in held.slots):
        return False
    if not (
        all(map(_is, chain.from_iterable(dicts), islice(state, n, n + total)))
        and all(
            map(_is, chain.from_iterable(map(dict.values, dicts)), islice(state, n + total, end))
        )
    ):
        return False
    # Each slot's values read and compared in C as they are read, no list built.
    try:
        for descriptors, group in held.slots:
            for d in descriptors:
                if not all(map(_is, map(d.__get__, group), islice(state, end, end + len(group)))):
                    return False
                end += len(group)
    except (AttributeError, TypeError):  # A slot deleted since.
        return False
    return True


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
    one Python call each on every hit) as one `records_state`, which reads the same in C; and
    always that state, where the walk left none (slots and NamedTuple records, keyed by value:
    their slots and classes watched here as `records_part` watches them; attack 14c-06/07)."""
    ids = set(map(id, records))
    states = [s for s in ctx.states if not (s[1] is attrs_state and id(s[0]) in ids)]
    # Not again those a `records_part` of the walk watches already.
    covered = {id(r) for s in states if s[1] is records_state for r in s[0].records}
    if covered:
        records = [r for r in records if id(r) not in covered]
        if not records:
            ctx.states[:] = states
            return
    held = Records(records)
    states.append((held, records_state, records_state(held)))
    ctx.states[:] = states


def _unkeyable(parts: Any) -> bool:
    # `top`'s key equal to nothing: `(TOO_MANY, Identity(...), "what it ran out in")`.
    return (
        type(parts) is tuple and len(parts) == 3 and parts[0] == TOO_MANY and type(parts[2]) is str
    )
