"""The zoo of `test_zoo.py`, part one: values (builtins and their subclasses, `collections`,
`array`, `decimal`, `fractions`, `datetime`, `pathlib`, `re`, `enum`, dataclasses, NamedTuples).

A kind makes objects from small indices (`make(i)`, a fresh object at every call), chosen so
that different indices often collide under `==` while behaving differently (`1`, `True` and `1.0`;
`Decimal('1.0')` and `Decimal('1.00')`; two time zones with the same offset and different names).
Its `read(obj)` is a plain Python number derived from the object's value, never from a hash, that
differs wherever the objects behave differently (the type's name, the iteration order, an
attribute), so that a program traced for one object and reused for another gives a wrong number.
`mutate(obj, i)` changes the object in place, for the kinds that can change.
"""

import array
import collections
import dataclasses
import datetime as dt
import decimal
import enum
import fractions
import math
import pathlib
import re
import struct
from collections.abc import Callable
from typing import Any, NamedTuple


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of object in the zoo.

    **Arguments:**

    - `name`: the kind's name, as reported.
    - `factory`: `factory(h)` returns `make(i)` for one case (fresh classes where the kind
      needs them, so that a mutation of a class never outlives its case).
    - `n`: how many indices `make` accepts.
    - `read`: the number a traced function computes from the object.
    - `mutate`: `mutate(obj, i)` changes the object in place; `None` for an immutable kind.
    - `eq_blind`: `read` observes what the user's own `==` ignores. Equinox (and so a jit cache)
      may share a program between such objects by the user's `==`; only `intern` and
      `StableModule` are checked, which must never substitute one for the other.
    - `cleanup`: undoes what `make` or `mutate` changed outside the case (`os.environ`).
    """

    name: str
    factory: Callable[[Any], Callable[[int], Any]]
    n: int
    read: Callable[[Any], Any]
    mutate: Callable[[Any, int], None] | None = None
    eq_blind: bool = False
    cleanup: Callable[[], None] | None = None


KINDS: list[Kind] = []


def kind(
    name: str,
    values: Callable[[int], Any] | None = None,
    *,
    n: int = 0,
    factory: Callable[[Any], Callable[[int], Any]] | None = None,
    mutate: Callable[[Any, int], None] | None = None,
    eq_blind: bool = False,
    cleanup: Callable[[], None] | None = None,
) -> Callable:
    """Adds a kind; decorates its `read`. `values(i)` makes the objects when no `factory` is
    given."""

    def add(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
        make_factory: Callable[[Any], Callable[[int], Any]]
        if factory is not None:
            make_factory = factory
        else:
            make: Callable[[int], Any] = values  # type: ignore[assignment]
            make_factory = lambda h: make  # noqa: E731
        KINDS.append(Kind(name, make_factory, n, read, mutate, eq_blind, cleanup))
        return read

    return add


def tname(obj: Any) -> int:
    """The length of the exact type's name: makes type-exactness observable."""
    return len(type(obj).__name__)


def sign(value: float) -> float:
    return math.copysign(1.0, value)


def weighted(items: Any) -> float:
    """A sum in which iteration order shows."""
    return float(sum((k + 1) * float(v) for k, v in enumerate(items)))


def _nan(payload: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0]


def _nan_payload(value: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", value))[0] & 0xF


# Builtin values, keyed type-exactly.


@kind("int_bool_float", lambda i: [1, True, 1.0, 2, 0][i], n=5)
def _read_number(o):
    return o + tname(o)


@kind("float_bits", lambda i: [0.0, -0.0, float("nan"), _nan(3), 1.5][i], n=5)
def _read_float(o):
    return sign(o) + (10.0 + _nan_payload(o) if o != o else o)


@kind("complex_signed_zero", lambda i: [complex(1, 0.0), complex(1, -0.0), 1j][i], n=3)
def _read_complex(o):
    return sign(o.imag) + o.real + tname(o)


@kind("str", lambda i: ["a", "ab", "b", ""][i], n=4)
def _read_str(o):
    return len(o) + sum(map(ord, o)) / 100


@kind("bytes", lambda i: [b"a", b"ab", b"", bytes([200])][i], n=4)
def _read_bytes(o):
    return len(o) + sum(o) / 100


@kind("tuple_mixed", lambda i: [(1, 2.0), (1.0, 2.0), (True, 2.0), (1, -0.0), ()][i], n=5)
def _read_tuple(o):
    return sum((k + 1) * (e + tname(e) + sign(e)) for k, e in enumerate(o)) + len(o)


@kind(
    "frozenset_order",
    lambda i: [
        frozenset([1, 9]),
        frozenset([9, 1]),
        frozenset([0.0]),
        frozenset([-0.0]),
        frozenset([1, 2]),
    ][i],
    n=5,
)
def _read_frozenset(o):
    return weighted(sign(e) + e for e in o)


@kind("range", lambda i: [range(0), range(5, 5), range(0, 4, 2), range(0, 3, 2)][i], n=4)
def _read_range(o):
    return o.start + 2 * o.stop + 3 * o.step + len(o)


@kind("slice", lambda i: [slice(1, 2), slice(1, 2, 1), slice(1.0, 2), slice(None)][i], n=4)
def _read_slice(o):
    return sum(
        tname(e) + (e if isinstance(e, (int, float)) else 0) for e in (o.start, o.stop, o.step)
    )


# Subclasses of builtins, with instance attributes: keyed by exact type, value and attributes.


class MyInt(int):
    pass


class MyFloat(float):
    pass


class MyStr(str):
    pass


class MyBytes(bytes):
    pass


class MyTuple(tuple):
    pass


class MyFrozenset(frozenset):
    pass


class LyingFloat(float):
    """A float whose `==` says every two are equal: never to be trusted."""

    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


def _with_w(cls: type, value: Any, w: float) -> Any:
    obj = cls(value)
    obj.w = w
    return obj


def _set_w(o, i):
    if hasattr(o, "__dict__"):  # Not the plain builtin among the kind's values.
        o.w = float(i)


@kind(
    "int_subclass",
    lambda i: [_with_w(MyInt, 1, 0.0), _with_w(MyInt, 1, 1.0), _with_w(MyInt, 2, 0.0), 1][i],
    n=4,
    mutate=_set_w,
)
def _read_int_sub(o):
    return int(o) + getattr(o, "w", 5.0) + tname(o)


@kind(
    "float_subclass",
    lambda i: [
        _with_w(MyFloat, -0.0, 0.0),
        _with_w(MyFloat, 0.0, 0.0),
        _with_w(MyFloat, 0.0, 2.0),
        0.0,
    ][i],
    n=4,
    mutate=_set_w,
)
def _read_float_sub(o):
    return sign(o) + getattr(o, "w", 5.0) + tname(o)


@kind(
    "str_subclass",
    lambda i: [_with_w(MyStr, "a", 0.0), _with_w(MyStr, "a", 1.0), "a"][i],
    n=3,
    mutate=_set_w,
)
def _read_str_sub(o):
    return len(o) + getattr(o, "w", 5.0) + tname(o)


@kind(
    "bytes_subclass",
    lambda i: [_with_w(MyBytes, b"a", 0.0), _with_w(MyBytes, b"a", 1.0), b"a"][i],
    n=3,
    mutate=_set_w,
)
def _read_bytes_sub(o):
    return len(o) + getattr(o, "w", 5.0) + tname(o)


@kind(
    "tuple_subclass",
    lambda i: [
        _with_w(MyTuple, (1, 2), 0.0),
        _with_w(MyTuple, (1, 2), 1.0),
        (1, 2),
        _with_w(MyTuple, (2, 1), 0.0),
    ][i],
    n=4,
    mutate=_set_w,
)
def _read_tuple_sub(o):
    return weighted(o) + getattr(o, "w", 5.0) + tname(o)


@kind(
    "frozenset_subclass",
    lambda i: [
        _with_w(MyFrozenset, [1, 9], 0.0),
        _with_w(MyFrozenset, [9, 1], 0.0),
        _with_w(MyFrozenset, [1, 9], 1.0),
        frozenset([1, 9]),
    ][i],
    n=4,
    mutate=_set_w,
)
def _read_frozenset_sub(o):
    return weighted(o) + getattr(o, "w", 5.0) + tname(o)


@kind("float_with_lying_eq", lambda i: [LyingFloat(1.0), LyingFloat(2.0), 1.0][i], n=3)
def _read_lying(o):
    return float(o) + tname(o)


# `collections`, `array`.


def _deque_append(o, i):
    o.append(i + 5)


@kind(
    "deque",
    lambda i: [
        collections.deque([1, 2]),
        collections.deque([1, 2], maxlen=2),
        collections.deque([2, 1]),
        collections.deque(),
    ][i],
    n=4,
    mutate=_deque_append,
)
def _read_deque(o):
    return weighted(o) + (o.maxlen or 0) * 10


def _od_mutate(o, i):
    if i % 2 and o:
        o.move_to_end(next(iter(o)))
    else:
        o["c"] = i


@kind(
    "ordered_dict",
    lambda i: [
        collections.OrderedDict(a=1, b=2),
        collections.OrderedDict(b=2, a=1),
        collections.OrderedDict(a=1.0, b=2),
        collections.OrderedDict(),
    ][i],
    n=4,
    mutate=_od_mutate,
)
def _read_od(o):
    return weighted(v + tname(v) + ord(k[0]) / 100 for k, v in o.items())


def _dd_mutate(o, i):
    o["z"] = i


@kind(
    "defaultdict",
    lambda i: [
        collections.defaultdict(int, a=1),
        collections.defaultdict(float, a=1),
        collections.defaultdict(int, a=2),
        collections.defaultdict(None, a=1),
    ][i],
    n=4,
    mutate=_dd_mutate,
)
def _read_dd(o):
    made = o.default_factory() if o.default_factory is not None else 7
    return weighted(o.values()) + tname(made)


def _counter_mutate(o, i):
    o["c"] += i + 1


@kind(
    "counter",
    lambda i: [
        collections.Counter(a=1),
        collections.Counter(a=1, b=0),
        collections.Counter(a=2),
        collections.Counter(b=0, a=1),
    ][i],
    n=4,
    mutate=_counter_mutate,
)
def _read_counter(o):
    return len(o) * 10 + weighted(o.values()) + len(list(o.elements()))


def _chainmap_mutate(o, i):
    o.maps[-1]["z"] = i


@kind(
    "chainmap",
    lambda i: [
        collections.ChainMap({"a": 1}),
        collections.ChainMap({"a": 1}, {"a": 2}),
        collections.ChainMap({"a": 1}, {"b": 0}),
        collections.ChainMap({"a": 2}),
    ][i],
    n=4,
    mutate=_chainmap_mutate,
)
def _read_chainmap(o):
    return len(o.maps) * 10 + len(o) + weighted(o[k] for k in sorted(o))


_P = collections.namedtuple("_P", "a b")
_Q = collections.namedtuple("_Quux", "a b")


@kind("namedtuple", lambda i: [_P(1, 2), _Q(1, 2), (1, 2), _P(1.0, 2)][i], n=4)
def _read_namedtuple(o):
    return weighted(o) + tname(o) + tname(o[0])


def _array_mutate(o, i):
    o[0] = i


@kind(
    "array",
    lambda i: [
        array.array("d", [1, 2]),
        array.array("f", [1, 2]),
        array.array("i", [1, 2]),
        array.array("d", [2, 1]),
    ][i],
    n=4,
    mutate=_array_mutate,
)
def _read_array(o):
    return weighted(o) + o.itemsize


# `decimal`, `fractions`, `datetime`, `pathlib`, `re`.


@kind("decimal", lambda i: decimal.Decimal(["1.0", "1.00", "0", "-0", "1E+1", "10"][i]), n=6)
def _read_decimal(o):
    return float(o) + len(str(o)) + sign(float(o))


@kind(
    "fraction",
    lambda i: [
        fractions.Fraction(1, 2),
        fractions.Fraction(2, 4),
        fractions.Fraction(1, 3),
        fractions.Fraction(-0.0),
    ][i],
    n=4,
)
def _read_fraction(o):
    return o.numerator + o.denominator * 10


_UTC = dt.timezone.utc
_PLUS1 = dt.timezone(dt.timedelta(hours=1))
_NAMED = dt.timezone(dt.timedelta(0), "Zoo")


@kind(
    "datetime_tz",
    lambda i: [
        dt.datetime(2020, 1, 1, 12, tzinfo=_UTC),
        dt.datetime(2020, 1, 1, 13, tzinfo=_PLUS1),
        dt.datetime(2020, 1, 1, 12, tzinfo=_NAMED),
        dt.datetime(2020, 1, 1, 12),
    ][i],
    n=4,
)
def _read_datetime_tz(o):
    return o.hour + len(o.tzname() or "") * 10


@kind(
    "datetime_fold",
    lambda i: [
        dt.datetime(2020, 1, 1, 1),
        dt.datetime(2020, 1, 1, 1, fold=1),
        dt.time(1, fold=1),
        dt.time(1),
    ][i],
    n=4,
)
def _read_fold(o):
    return o.hour + o.fold * 10 + tname(o)


@kind(
    "timezone",
    lambda i: [
        dt.timezone(dt.timedelta(0)),
        dt.timezone(dt.timedelta(0), "A"),
        dt.timezone(dt.timedelta(0), "BBB"),
        dt.timezone.utc,
    ][i],
    n=4,
)
def _read_timezone(o):
    return len(o.tzname(None))


@kind(
    "path",
    lambda i: [
        pathlib.PurePosixPath("a/b"),
        pathlib.PurePosixPath("a//b"),
        pathlib.PureWindowsPath("A/b"),
        pathlib.PureWindowsPath("a/B"),
        pathlib.Path("a/b"),
    ][i],
    n=5,
)
def _read_path(o):
    return len(str(o)) + sum(map(ord, str(o))) / 1000 + tname(o)


@kind(
    "re_pattern",
    lambda i: [re.compile("a"), re.compile("a", re.I), re.compile("(a)"), re.compile(b"a")][i],
    n=4,
)
def _read_pattern(o):
    text = "A" if isinstance(o.pattern, str) else b"A"
    return o.groups * 10 + (o.match(text) is not None) + len(o.pattern) + o.flags / 1000


# `enum`: fresh classes per case, so that their attributes can be changed.


def _enum_factory(h):
    class Color(enum.Enum):
        RED = 1
        BLUE = 2

    class Level(enum.IntEnum):
        LOW = 1

    return lambda i: [Color.RED, Color.BLUE, Level.LOW, 1, Color(1)][i]


def _enum_mutate(o: Any, i: int) -> None:
    # A member's own attribute, or its class's: both read by the traced function.
    if isinstance(o, enum.Enum):
        if i % 2:
            setattr(type(o), "scale", float(i))
        else:
            setattr(o, "w", float(i))


@kind("enum", factory=_enum_factory, n=5, mutate=_enum_mutate)
def _read_enum(o):
    return (
        getattr(o, "value", o)
        + tname(o)
        + getattr(o, "w", 0.0)
        + getattr(type(o), "scale", 0.0) * 100
    )


class Perm(enum.Flag):
    R = 1
    W = 2
    X = 4


class IPerm(enum.IntFlag):
    R = 1
    W = 2


@kind(
    "flag",
    lambda i: [Perm.R, Perm.R | Perm.W, Perm(0), Perm.W, IPerm.R | IPerm.W, 3, IPerm(3)][i],
    n=7,
)
def _read_flag(o: Any) -> Any:
    # Iterating a flag lists its members (Python 3.11); before, count its set bits.
    members = bin(o.value).count("1") if isinstance(o, enum.Flag) else 0
    value: Any = getattr(o, "value", o)
    return int(value) + members * 10 + tname(o) * 100


# Dataclasses with every combination of frozen, eq and slots. Identity semantics (`eq=False`)
# are made observable the way a program would rely on them: as keys of a registry dict.

REGISTRY: dict[Any, float] = {}


def _dataclass_factory(frozen: bool, eq: bool, slots: bool) -> Callable:
    def factory(h):
        @dataclasses.dataclass(frozen=frozen, eq=eq, slots=slots)
        class Data:
            a: float
            b: int

        REGISTRY.clear()

        def make(i):
            obj = Data(*[(1.0, 1), (1.0, 2), (-0.0, 1), (1, 1), (1.0, 1)][i])
            if i == 0 and type(obj).__hash__ is not None:
                REGISTRY[obj] = 100.0
            return obj

        return make

    return factory


def _dataclass_mutate(o, i):
    if not type(o).__dataclass_params__.frozen:
        o.a = float(i)


def _read_dataclass(o):
    registered = REGISTRY.get(o, 0.0) if type(o).__hash__ is not None else 0.0
    return o.a + 2 * o.b + tname(o.a) + sign(o.a) + registered


for _frozen in (False, True):
    for _eq in (False, True):
        for _slots in (False, True):
            kind(
                f"dataclass(frozen={_frozen}, eq={_eq}, slots={_slots})",
                factory=_dataclass_factory(_frozen, _eq, _slots),
                n=5,
                mutate=_dataclass_mutate,
            )(_read_dataclass)


def _named_tuple_factory(h):
    class Pair(NamedTuple):
        a: float
        b: float = 1.0

        @property
        def total(self):
            return self.a + 2 * self.b

    class Scaled(Pair):
        scale = 1.0

    return lambda i: [Pair(1.0), Scaled(1.0), Pair(1, 1), Scaled(2.0), (1.0, 1.0)][i]


def _named_tuple_mutate(o, i):
    # The subclass's class attribute: a NamedTuple instance itself cannot change.
    if hasattr(type(o), "scale"):
        type(o).scale = float(i)


@kind("NamedTuple", factory=_named_tuple_factory, n=5, mutate=_named_tuple_mutate)
def _read_named_tuple(o):
    return getattr(o, "total", 0.0) + getattr(type(o), "scale", 0.0) * 10 + tname(o) * 100


class Holder(NamedTuple):
    items: list


def _holder_mutate(o, i):
    o.items.append(i)


@kind(
    "NamedTuple_holding_list",
    lambda i: Holder([[1, 2], [1, 2], [2, 1]][i]),
    n=3,
    mutate=_holder_mutate,
)
def _read_holder(o):
    return weighted(o.items)


# Builtin subclasses whose changeable state is not in an instance `__dict__`: slots, the class.


class SlotFloat(float):
    __slots__ = ("w",)


def _slot_float(value, w):
    obj = SlotFloat(value)
    obj.w = w
    return obj


def _set_slot_w(o, i):
    o.w = float(i)


@kind(
    "float_subclass_with_slots",
    lambda i: [_slot_float(1, 0.0), _slot_float(1, 1.0), _slot_float(2, 0.0)][i],
    n=3,
    mutate=_set_slot_w,
)
def _read_slot_float(o):
    return float(o) + o.w * 10


def _class_attribute_factory(h):
    class Scaled(float):
        scale = 1.0

    return lambda i: Scaled([1.0, 1.0, 2.0][i])


def _class_attribute_mutate(o, i):
    setattr(type(o), "scale", float(i))


@kind(
    "float_subclass_class_attribute",
    factory=_class_attribute_factory,
    n=3,
    mutate=_class_attribute_mutate,
)
def _read_class_attribute(o):
    return float(o) + getattr(type(o), "scale") * 10
