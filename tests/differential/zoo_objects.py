"""The zoo of `test_zoo.py`, part two: objects (user classes with their own `__eq__`,
`__hash__`, `__getstate__`, `__reduce__`, `__getattr__`; modules with a PEP 562 `__getattr__`;
ctypes; `memoryview`; weak references and weak containers; `os.environ` and `sys.argv`; NumPy
arrays, scalars and dtypes; mutable builtins). See `zoo_values.py` for what a kind is."""

import collections
import ctypes
import dataclasses
import datetime as dt
import enum
import functools
import os
import sys
import types
import weakref
from typing import Any

import numpy as np

from ..helpers import PartialState
from .zoo_values import kind, REGISTRY, tname, weighted


# User classes. A class with its own `==` is compared by it (as Equinox does), so its `read`
# observes only what its `==` compares, unless the kind is `eq_blind`.


class UserEq:
    def __init__(self, a):
        self.a = a

    def __eq__(self, other):
        return isinstance(other, UserEq) and self.a == other.a

    def __hash__(self):
        return hash(self.a)


class UserEqChild(UserEq):
    pass


def _set_a(o, i):
    o.a = float(i)


@kind(
    "user_eq_hash",
    lambda i: [UserEq(1.0), UserEqChild(1.0), UserEq(2.0), UserEq(1)][i],
    n=4,
    mutate=_set_a,
)
def _read_user_eq(o):
    return o.a + tname(o) * 10 + tname(o.a) * 100


class Reduced(PartialState):
    def __reduce__(self):
        return (Reduced, (self.a, 1.0))


def _set_scale(o, i):
    o.scale = float(i)


@kind(
    "user_getstate",
    lambda i: PartialState(*[(1.0, 1.0), (1.0, 2.0), (2.0, 1.0)][i]),
    n=3,
    mutate=_set_scale,
)
def _read_scaled(o):
    return o.a + o.scale * 10


kind(
    "user_reduce",
    lambda i: Reduced(*[(1.0, 1.0), (1.0, 2.0), (2.0, 1.0)][i]),
    n=3,
    mutate=_set_scale,
)(_read_scaled)


class Sink:
    """A handle equal by name that holds its own list (a logger, a metric sink)."""

    def __init__(self, name):
        self.name, self.log = name, []

    def __eq__(self, other):
        return isinstance(other, Sink) and self.name == other.name

    def __hash__(self):
        return hash(self.name)


def _sink_mutate(o, i):
    o.log.append(i)


@kind(
    "hashable_with_own_list",
    lambda i: Sink(["loss", "loss", "acc"][i]),
    n=3,
    mutate=_sink_mutate,
    eq_blind=True,
)
def _read_sink(o):
    return len(o.name) + 10 * len(o.log) + weighted(o.log)


class Served:
    """Attributes served by `__getattr__` from a table."""

    def __init__(self, lr):
        self._table = {"lr": lr}

    def __getattr__(self, name):
        try:
            return self.__dict__["_table"][name]
        except KeyError:
            raise AttributeError(name) from None


def _served_mutate(o, i):
    o._table["lr"] = float(i)


@kind("user_getattr", lambda i: Served([1.0, 2.0, 1][i]), n=3, mutate=_served_mutate)
def _read_served(o):
    return o.lr + tname(o.lr)


class HashOnly:
    """`__hash__` without `__eq__` (eqxstable warns; its equality is identity)."""

    def __init__(self, a):
        self.a = a

    def __hash__(self):
        return 1


def _registered(factory_values):
    def factory(h):
        REGISTRY.clear()

        def make(i):
            obj = factory_values(i)
            if i == 0:
                REGISTRY[obj] = 100.0
            return obj

        return make

    return factory


def _read_registered_a(o):
    return o.a + REGISTRY.get(o, 0.0)


kind(
    "hash_without_eq",
    factory=_registered(lambda i: HashOnly([1.0, 1.0, 2.0][i])),
    n=3,
    mutate=_set_a,
)(_read_registered_a)


class Plain:
    def __init__(self, a):
        self.a = a


class Slotted:
    __slots__ = ("a", "__weakref__")

    def __init__(self, a):
        self.a = a


kind("plain_object", factory=_registered(lambda i: Plain([1.0, 1.0, 2.0][i])), n=3, mutate=_set_a)(
    _read_registered_a
)
kind(
    "slots_object", factory=_registered(lambda i: Slotted([1.0, 1.0, 2.0][i])), n=3, mutate=_set_a
)(_read_registered_a)


def _namespace_mutate(o, i):
    o.a = float(i)


@kind(
    "simple_namespace",
    lambda i: types.SimpleNamespace(a=[1.0, 1.0, 2.0][i]),
    n=3,
    mutate=_namespace_mutate,
)
def _read_namespace(o):
    return o.a


# Modules: a PEP 562 `__getattr__`, and a plain module attribute.

_PEP562 = """\
_TABLE = {{"LR": {lr}}}


def __getattr__(name):
    if name in _TABLE:
        return _TABLE[name]
    raise AttributeError(name)
"""


def _module_factory(source: str):
    def factory(h):
        return lambda i: h.write_module(source.format(lr=[1.0, 1.0, 2.0][i]))

    return factory


def _pep562_mutate(o, i):
    o._TABLE["LR"] = float(i)


@kind("module_with_getattr", factory=_module_factory(_PEP562), n=3, mutate=_pep562_mutate)
def _read_module_lr(o):
    return o.LR


def _module_mutate(o, i):
    o.LR = float(i)


kind("module_attribute", factory=_module_factory("LR = {lr}\n"), n=3, mutate=_module_mutate)(
    _read_module_lr
)


# Process state read by library code: `os.environ`, `sys.argv`.

_ENV = "EQXSTABLE_ZOO_VALUE"


def _environ(i):
    os.environ[_ENV] = str(i)
    return os.environ


def _environ_mutate(o, i):
    o[_ENV] = str(i + 10)


def _environ_cleanup():
    os.environ.pop(_ENV, None)


@kind("os_environ", _environ, n=3, mutate=_environ_mutate, cleanup=_environ_cleanup)
def _read_environ(o):
    return float(o.get(_ENV, "-1"))


_ARGV = list(sys.argv)


def _argv(i):
    sys.argv[:] = [*_ARGV, f"--zoo={i}"]
    return sys.argv


def _argv_mutate(o, i):
    o[-1] = f"--zoo={i + 10}"


def _argv_cleanup():
    sys.argv[:] = _ARGV


@kind("sys_argv", _argv, n=3, mutate=_argv_mutate, cleanup=_argv_cleanup)
def _read_argv(o):
    return float(o[-1].split("=")[-1])


# C data: ctypes, `memoryview`, `bytearray`.


def _ctypes_mutate(o, i):
    if isinstance(o, ctypes.Array):
        o[0] = i
    else:
        o.value = i


@kind(
    "ctypes",
    lambda i: [
        ctypes.c_double(1.0),
        ctypes.c_double(1.0),
        ctypes.c_int(1),
        (ctypes.c_int * 2)(1, 2),
    ][i],
    n=4,
    mutate=_ctypes_mutate,
)
def _read_ctypes(o):
    if isinstance(o, ctypes.Array):
        return weighted(o)
    return o.value + tname(o) * 10


def _memoryview_mutate(o, i):
    o.obj[0] = i


@kind(
    "memoryview",
    lambda i: memoryview(bytearray([[1, 2], [1, 2], [2, 1]][i])),
    n=3,
    mutate=_memoryview_mutate,
)
def _read_memoryview(o):
    return weighted(o)


def _bytearray_mutate(o, i):
    o[0] = i


@kind("bytearray", lambda i: bytearray([[1, 2], [1, 2], [2, 1]][i]), n=3, mutate=_bytearray_mutate)
def _read_bytearray(o):
    return weighted(o) + tname(o)


# Weak references and weak containers. The referents are kept alive for the case.


def _weak_factory(wrap):
    def factory(h):
        keep: list[Any] = []

        def make(i):
            target = UserEq([1.0, 1.0, 2.0][i])
            keep.append(target)
            return wrap(target, keep)

        return make

    return factory


def _ref_mutate(o, i):
    o().a = float(i)


@kind("weakref", factory=_weak_factory(lambda t, keep: weakref.ref(t)), n=3, mutate=_ref_mutate)
def _read_ref(o):
    return o().a


def _proxy_mutate(o, i):
    o.a = float(i)


@kind(
    "weakproxy", factory=_weak_factory(lambda t, keep: weakref.proxy(t)), n=3, mutate=_proxy_mutate
)
def _read_proxy(o):
    return o.a


def _weak_values(t, keep):
    d = weakref.WeakValueDictionary()
    d["k"] = t
    return d


def _weak_values_mutate(o, i):
    o["k"].a = float(i)


@kind("weak_value_dict", factory=_weak_factory(_weak_values), n=3, mutate=_weak_values_mutate)
def _read_weak_values(o):
    return weighted(v.a for v in o.values()) + len(o) * 10


def _weak_set(t, keep):
    return weakref.WeakSet([t])


def _weak_set_mutate(o, i):
    extra = UserEq(float(i) + 5)
    _KEEP_ALIVE.append(extra)
    o.add(extra)


_KEEP_ALIVE: list[Any] = []


@kind("weak_set", factory=_weak_factory(_weak_set), n=3, mutate=_weak_set_mutate)
def _read_weak_set(o):
    return sum(v.a for v in o) + len(o) * 10


# Mutable builtins and their subclasses.


class MyList(list):
    pass


class MissingDict(dict):
    def __missing__(self, key):
        return 3.0


def _list_mutate(o, i):
    o.append(float(i))


@kind(
    "list",
    lambda i: [[1.0, -0.0], [1.0, 0.0], [1, 0], MyList([1.0, 0.0])][i],
    n=4,
    mutate=_list_mutate,
)
def _read_list(o):
    # `isinstance`, not the exact type: a `StableModule` holds a frozen list (CONTRACT section 2).
    return weighted(o) + sum(tname(e) for e in o) + isinstance(o, MyList) * 100


def _dict_mutate(o, i):
    o["b"] = float(i)


@kind(
    "dict",
    lambda i: [{"a": 1.0}, {"a": 1}, MissingDict(a=1.0), {"a": 1.0, "b": 0.0}][i],
    n=4,
    mutate=_dict_mutate,
)
def _read_dict(o):
    return o["a"] + o.get("b", 0.5) + (o["zz"] if isinstance(o, MissingDict) else 0)


def _set_mutate(o, i):
    o.add(i + 5)


@kind("set", lambda i: [{1, 9}, {9, 1}, {1.0, 9}][i], n=3, mutate=_set_mutate)
def _read_set(o):
    return weighted(o) + sum(tname(e) for e in o)


def _proxy_factory(h):
    def make(i):
        d = {"a": [1.0, 1.0, 2.0][i]}
        proxy = types.MappingProxyType(d)
        _PROXIED[id(proxy)] = d
        return proxy

    return make


_PROXIED: dict[int, dict] = {}


def _mapping_proxy_mutate(o, i):
    _PROXIED[id(o)]["a"] = float(i)


@kind(
    "mapping_proxy",
    factory=_proxy_factory,
    n=3,
    mutate=_mapping_proxy_mutate,
    cleanup=_PROXIED.clear,
)
def _read_mapping_proxy(o):
    return o["a"]


# NumPy: arrays (structured dtypes, read-only views of writable bases), scalars, dtypes.


def _array_mutate(o, i):
    if o.dtype.names:
        o[o.dtype.names[0]][0] = i
    elif o.flags.writeable:
        o[..., 0] = i
    else:
        o.base[..., 0] = i


def _read_only_view(values, dtype):
    base = np.array(values, dtype=dtype)
    view = base[:]
    view.flags.writeable = False
    return view


@kind(
    "numpy_array",
    lambda i: [
        np.array([1.0, 2.0]),
        np.array([1.0, 2.0], np.float32),
        np.array([1, 2], np.int32),
        np.array([[1.0, 2.0]]),
        _read_only_view([1.0, 2.0], np.float64),
    ][i],
    n=5,
    mutate=_array_mutate,
)
def _read_numpy_array(o):
    return float(o.sum()) + o.itemsize + o.ndim * 100 + float(o.ravel()[0]) * 10


def _structured(names, align=False):
    dtype = np.dtype([(names[0], "<f4"), (names[1], "<i4")], align=align)
    a = np.zeros(2, dtype)
    a[names[0]] = 1.0
    return a


@kind(
    "numpy_structured",
    lambda i: [_structured("ab"), _structured("xb"), _structured("ab"), _structured("ba")][i],
    n=4,
    mutate=_array_mutate,
)
def _read_structured(o):
    first = o.dtype.names[0]
    return ord(first) + float(o[first].sum()) * 10 + o.dtype.itemsize * 100


@kind(
    "numpy_scalar",
    lambda i: [
        np.float32(1),
        np.float64(1),
        np.int32(1),
        np.bool_(True),
        np.float16(-0.0),
        np.float16(0.0),
    ][i],
    n=6,
)
def _read_numpy_scalar(o):
    return float(o) + o.itemsize * 10 + tname(o) * 100 + float(np.copysign(1, o)) * 1000


def _void_mutate(o, i):
    o[o.dtype.names[0]] = i


@kind("numpy_void", lambda i: _structured(["ab", "xb", "ab"][i])[0], n=3, mutate=_void_mutate)
def _read_void(o):
    first = o.dtype.names[0]
    return ord(first) + float(o[first]) * 10


@kind(
    "numpy_dtype",
    lambda i: [
        np.dtype("f4"),
        np.dtype("f4", metadata={"a": 1}),
        np.dtype("<f4"),
        np.dtype([("a", "<f4")]),
        np.dtype([("b", "<f4")]),
    ][i],
    n=5,
)
def _read_dtype(o):
    return o.itemsize + len(o.metadata or {}) * 10 + len(str(o)) * 100


# Immutable-looking containers and values that hold something that can change.


class ShiftTZ(dt.tzinfo):
    """A user time zone whose offset is an attribute: an aware datetime's `==` and `hash` ask it."""

    def __init__(self, hours):
        self.hours = hours

    def utcoffset(self, d):
        return dt.timedelta(hours=self.hours)

    def tzname(self, d):
        return f"Z{self.hours}"

    def dst(self, d):
        return dt.timedelta(0)


def _tz_mutate(o, i):
    o.tzinfo.hours = float(i)


@kind(
    "datetime_user_tzinfo",
    lambda i: dt.datetime(2020, 1, 1, 12, tzinfo=ShiftTZ([1.0, 1.0, 2.0][i])),
    n=3,
    mutate=_tz_mutate,
)
def _read_user_tz(o):
    return o.utcoffset().total_seconds() / 3600 + o.hour * 10


def _first_a_mutate(o, i):
    next(iter(o)).a = float(i)


@kind(
    "frozenset_of_user_objects",
    lambda i: frozenset([UserEq([1.0, 1.0, 2.0][i])]),
    n=3,
    mutate=_first_a_mutate,
)
def _read_frozenset_user(o):
    return sum(e.a for e in o)


def _items_mutate(o, i):
    o.items.append(float(i))


@dataclasses.dataclass(frozen=True)
class FrozenHolder:
    items: list


@kind(
    "frozen_dataclass_holding_list",
    lambda i: FrozenHolder([[1.0, 2.0], [1.0, 2.0], [2.0, 1.0]][i]),
    n=3,
    mutate=_items_mutate,
)
def _read_frozen_holder(o):
    return weighted(o.items) + len(o.items) * 10


def _tuple_list_mutate(o, i):
    o[1].append(float(i))


@kind(
    "tuple_holding_list",
    lambda i: ("w", [[1.0, 2.0], [1.0, 2.0], [2.0, 1.0]][i]),
    n=3,
    mutate=_tuple_list_mutate,
)
def _read_tuple_list(o):
    return weighted(o[1]) + len(o[1]) * 10


def _tuple_array_mutate(o, i):
    o[0][0] = i


@kind(
    "tuple_holding_ndarray",
    lambda i: (np.array([[1.0, 2.0], [1.0, 2.0], [2.0, 1.0]][i]),),
    n=3,
    mutate=_tuple_array_mutate,
)
def _read_tuple_array(o):
    return weighted(o[0].tolist())


def _userdict_mutate(o, i):
    o["a"] = float(i)


@kind(
    "userdict",
    lambda i: collections.UserDict(a=[1.0, 1.0, 2.0][i]),
    n=3,
    mutate=_userdict_mutate,
)
def _read_userdict(o):
    return o["a"] + len(o) * 10


def _mask_mutate(o, i):
    o.mask[i % 2] = not o.mask[i % 2]


@kind(
    "numpy_masked_array",
    lambda i: np.ma.array([1.0, 2.0], mask=[[False, True], [False, False], [True, False]][i]),
    n=3,
    mutate=_mask_mutate,
)
def _read_masked(o):
    return float(o.filled(0.0).sum()) + int(o.count()) * 10


class Other(Plain):
    pass


def _class_mutate(o, i):
    o.__class__ = Other if i % 2 else Plain


@kind("class_swapped", lambda i: [Plain, Other, Plain][i](1.0), n=3, mutate=_class_mutate)
def _read_class_swapped(o):
    return o.a + tname(o) * 10


def _enum_list_factory(h):
    class Widths(enum.Enum):
        SMALL = [1.0, 2.0]
        LARGE = [3.0]

    return lambda i: [Widths.SMALL, Widths.LARGE, Widths.SMALL][i]


def _enum_list_mutate(o, i):
    o.value.append(float(i))


@kind("enum_with_list_value", factory=_enum_list_factory, n=3, mutate=_enum_list_mutate)
def _read_enum_list(o):
    return weighted(o.value) + len(o.value) * 10


def _total(items):
    return weighted(items)


def _partial_mutate(o, i):
    o.args[0].append(float(i))


@kind(
    "partial_over_list",
    lambda i: functools.partial(_total, [[1.0, 2.0], [1.0, 2.0], [2.0, 1.0]][i]),
    n=3,
    mutate=_partial_mutate,
)
def _read_partial(o):
    return o()


@dataclasses.dataclass(frozen=True)
class Tagged:
    a: float
    tag: str = dataclasses.field(compare=False, default="x")


@kind(
    "dataclass_compare_false",
    lambda i: Tagged(1.0, ["x", "yyy", "x"][i]),
    n=3,
    eq_blind=True,
)
def _read_tagged(o):
    return o.a + len(o.tag) * 10
