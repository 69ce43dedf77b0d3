"""Value keys and substitution only by the allowlist (`eqxstable/_keys/README.md`): everything a
row does not name keeps identity, or its own `==` where its class defines one, and is never
substituted by `intern` or `StableModule`."""

import array
import ctypes
import dataclasses
import datetime
import decimal
import enum
import fractions
import importlib
import inspect
import itertools
import logging
import mmap
import os
import pathlib
import re
import sys
import threading
import types
import uuid
import weakref
import zoneinfo
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, strategies as st

import eqxstable as es
from eqxstable._keys import compute


def key(obj: Any) -> Any:
    return es.stable_key(obj)


class Sink:
    """Hashable by name, each holding a list of its own (an ensemble member's log)."""

    def __init__(self, name):
        self.name = name
        self.items = []

    def __eq__(self, other):
        return type(other) is Sink and other.name == self.name

    def __hash__(self):
        return hash(self.name)


class LeavesOut:
    """Its `__getstate__` leaves `scale` out; its `==` compares `scale`."""

    def __init__(self, scale):
        self.scale = scale

    def __eq__(self, other):
        return type(other) is LeavesOut and other.scale == self.scale

    def __hash__(self):
        return 0

    def __getstate__(self):
        return {}


class SubSink(Sink):
    pass


def test_own_eq_is_its_own_eq_type_exactly_never_substituted():
    sinks = [Sink("loss") for _ in range(3)]
    # Its `==`, and (a further condition) its attributes: each holds a list of its own.
    assert key(sinks[0]) != key(sinks[1])
    assert key(sinks[0]) != key(SubSink("loss")) and key(sinks[0]) != key(Sink("acc"))
    shared: list = []
    a, b = Sink("loss"), Sink("loss")
    a.items = b.items = shared
    assert key(a) == key(b) and es.intern(b) is b
    assert [es.intern(s) for s in sinks] == sinks
    assert all(es.intern(s) is s for s in sinks)
    # Nor through a closure or a tuple holding one.
    closures = [(lambda s: lambda x: (s.items.append(1), x)[1])(s) for s in sinks]
    assert all(es.intern(c) is c for c in closures)
    assert all(es.intern((s, 1))[0] is s for s in sinks)
    # A guessed state is never the key: unequal objects are never equivalent.
    assert key(LeavesOut(1.0)) != key(LeavesOut(2.0))


def test_sinks_stay_apart_in_a_stable_module():
    class Member(es.StableModule):
        sink: Any = eqx.field(static=True)
        fn: Any

    members = [Member(Sink("loss"), (lambda s: lambda: s)(Sink("loss"))) for _ in range(3)]
    for m in members:
        m.sink.items.append(1)
    assert [len(m.sink.items) for m in members] == [1, 1, 1]
    assert len({id(m.fn()) for m in members}) == 3
    trees = [es.stabilize({"s": Sink("loss")}) for _ in range(3)]
    assert len({id(t["s"]) for t in trees}) == 3


class Always:
    """A user's callable whose `==` calls every instance equal."""

    def __init__(self, k):
        self.k = k

    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0

    def __call__(self, x):
        return x * self.k


@pytest.mark.counts_traces
def test_own_eq_never_shares_a_program_between_different_states():
    f = es.filter_jit(lambda g, x: g(x))
    assert float(f(Always(2.0), jnp.float32(1))) == 2.0
    assert float(f(Always(3.0), jnp.float32(1))) == 3.0


@dataclasses.dataclass(frozen=True, eq=False)
class Handle:
    value: Any


@dataclasses.dataclass(frozen=True)
class Point:
    x: Any


@dataclasses.dataclass(frozen=True, slots=True)
class SlotPoint:
    x: Any


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class SlotHandle:
    x: Any


@dataclasses.dataclass(frozen=True)
class ByName:
    name: str
    scale: float

    def __eq__(self, other):
        return type(other) is ByName and other.name == self.name

    def __hash__(self):
        return hash(self.name)


def test_dataclasses_by_their_equality():
    # `eq=False`: identity is its equality.
    for make in (Handle, SlotHandle):
        a, b = make(1.0), make(1.0)
        assert key(a) != key(b) and es.intern(b) is b
    # Value equality: fields, substituted.
    for make in (Point, SlotPoint):
        a, b = make(1.0), make(1.0)
        assert key(a) == key(b) and es.intern(b) is es.intern(a)
        assert key(make(1.0)) != key(make(1))
    # An `__eq__` of its own: that `==` (and its fields), never substituted.
    c, d = ByName("a", 1.0), ByName("a", 1.0)
    assert key(c) == key(d) and es.intern(d) is d
    assert key(c) != key(ByName("a", 2.0))


def test_weak_references_are_identity_never_substituted():
    class Target:
        def __init__(self, v):
            self.v = v

        def __eq__(self, other):
            return True

        def __hash__(self):
            return 0

        def method(self):
            return self.v

    a, b = Target(1), Target(2)
    ra, rb = weakref.ref(a), weakref.ref(b)
    assert key(ra) != key(rb)
    assert es.intern(ra) is ra and es.intern(rb) is rb
    ma, mb = weakref.WeakMethod(a.method), weakref.WeakMethod(b.method)
    assert es.intern(ma) is ma and es.intern(mb) is mb and key(ma) != key(mb)
    pa = weakref.proxy(a)
    assert key(pa) != key(pa)  # Nothing to name: a key equal to nothing.
    # Through a closure: a referent changed in place is seen.
    f = (lambda r: lambda x: x * r().v)(ra)  # pyright: ignore[reportOptionalMemberAccess]
    before = key(f)
    a.v = 5
    assert key(f) != before


def test_weak_containers_identity_and_items_watched():
    class Box:
        def __init__(self, v):
            self.v = v

    box = Box(1.0)
    d = weakref.WeakValueDictionary({"w": box})
    e = weakref.WeakValueDictionary({"w": box})
    assert key(d) != key(e) and es.intern(e) is e
    f = (lambda d: lambda x: x * d["w"].v)(d)
    before = key(f)
    box.v = 2.0
    assert key(f) != before
    before = key(f)
    other = Box(3.0)
    d["v"] = other
    assert key(f) != before


def reads_environ(x):
    return x * float(os.environ["EQXS_TEST_SCALE"])


def reads_argv(x):
    return x * len(sys.argv)


@pytest.mark.counts_traces
def test_library_data_read_by_a_function_is_keyed(monkeypatch):
    monkeypatch.setenv("EQXS_TEST_SCALE", "2.0")
    results = []
    for scale in ("2.0", "3.0"):
        os.environ["EQXS_TEST_SCALE"] = scale
        fn = types.FunctionType(reads_environ.__code__, globals())  # rebuilt per setting
        results.append(float(es.filter_jit(fn)(jnp.float32(1))))
    assert results == [2.0, 3.0]
    same = es.filter_jit(reads_environ)
    os.environ["EQXS_TEST_SCALE"] = "4.0"
    assert float(same(jnp.float32(1))) == 4.0
    os.environ["EQXS_TEST_SCALE"] = "5.0"
    assert float(same(jnp.float32(1))) == 5.0
    before = key(reads_argv)
    monkeypatch.setattr(sys, "argv", [*sys.argv, "extra"])
    assert key(reads_argv) != before


def test_library_constants_stay_constants():
    def uses_code(x):
        return jnp.sin(x) + jax.nn.relu(x) + np.pi

    k = key(uses_code)
    assert not k.identity
    twin = types.FunctionType(uses_code.__code__, globals())
    twin.__qualname__ = uses_code.__qualname__  # Python 3.10 takes it from `co_name`.
    assert key(twin) == k
    assert key(os.environ).identity and es.intern(os.environ) is os.environ
    assert key(sys.argv).identity
    # Optax transforms, `jax.jit` wrappers and partials rebuilt are still one.
    assert es.intern(optax.adam(1e-3)) is es.intern(optax.adam(1e-3))
    assert key(optax.adam(1e-3)) != key(optax.adam(1e-4))
    g = lambda x: x  # noqa: E731
    assert es.intern(jax.jit(g)) is es.intern(jax.jit(g))


def test_module_getattr_makes_its_reader_unkeyable(tmp_path, monkeypatch):
    (tmp_path / "lazy_cfg_eqxs.py").write_text(
        "def __getattr__(name):\n"
        "    if name == 'LR':\n"
        "        return 0.1\n"
        "    raise AttributeError(name)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = importlib.import_module("lazy_cfg_eqxs")
    try:
        f = eval("lambda x: x * cfg.LR", {"cfg": cfg})
        assert key(f) != key(f)
        assert float(es.filter_jit(f)(jnp.float32(1))) == pytest.approx(0.1)
    finally:
        sys.modules.pop("lazy_cfg_eqxs", None)


@pytest.mark.parametrize(
    "make, change",
    [
        (lambda: memoryview(bytearray(b"ab")), lambda m: m.obj.__setitem__(0, 0)),
        (lambda: array.array("d", [1.0]), lambda a: a.__setitem__(0, 2.0)),
        (lambda: ctypes.c_double(1.0), lambda c: setattr(c, "value", 2.0)),
        (lambda: (ctypes.c_int * 2)(1, 2), lambda c: c.__setitem__(0, 5)),
    ],
    ids=["memoryview", "array", "ctypes", "ctypes-array"],
)
def test_buffers_identity_and_bytes_watched(make, change):
    a, b = make(), make()
    assert key(a) != key(b) and es.intern(b) is b
    f = (lambda a: lambda x: (x, a))(a)
    before = key(f)
    assert key(f) == before
    change(a)
    assert key(f) != before


def test_mmap_and_pointers():
    m = mmap.mmap(-1, 4)
    f = (lambda m: lambda x: (x, m))(m)
    before = key(f)
    m[0] = 7
    assert key(f) != before
    m.close()  # Never exported: closing still works.
    p = ctypes.pointer(ctypes.c_int(1))
    assert key(p) != key(p)


def test_allowlisted_library_values():
    D = decimal.Decimal
    assert key(D("1.00")) != key(D("1.0")) and key(D("1.5")) == key(D("1.5"))
    assert es.intern(D("1.5")) is es.intern(D("1.5"))
    assert key(D("NaN")) != key(D("sNaN"))
    F = fractions.Fraction
    assert key(F(1, 2)) == key(F(2, 4)) and key(F(1, 2)) != key(F(1, 3))
    tz = datetime.timezone(datetime.timedelta(hours=1), "X")
    t1 = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    t2 = datetime.datetime(2020, 1, 1, 1, tzinfo=tz)
    assert t1 == t2 and key(t1) != key(t2)
    assert key(t1.replace(fold=1)) != key(t1)
    assert key(datetime.datetime(2020, 1, 1)) == key(datetime.datetime(2020, 1, 1))
    z = zoneinfo.ZoneInfo("UTC")
    assert key(datetime.datetime(2020, 1, 1, tzinfo=z)) == key(
        datetime.datetime(2020, 1, 1, tzinfo=z)
    )
    assert key(datetime.timedelta(1)) != key(datetime.timedelta(0, 1))
    assert key(datetime.time(1, fold=1)) != key(datetime.time(1))
    assert key(pathlib.PurePosixPath("a")) != key(pathlib.Path("a"))
    assert key(pathlib.PurePosixPath("a/b")) != key(pathlib.PurePosixPath("a/c"))
    assert key(pathlib.PurePosixPath("a")) != key(pathlib.PureWindowsPath("a"))
    assert key(pathlib.Path("a/b")) == key(pathlib.Path("a") / "b")
    assert key(re.compile("a")) != key(re.compile("a", re.I))
    u = uuid.UUID(int=5)
    assert key(u) == key(uuid.UUID(int=5)) and key(u) != key(uuid.UUID(int=6))
    assert key(u) != key(uuid.UUID(int=7)) and key(u) != key(uuid.UUID(int=5 + 2**100))
    assert key(inspect.signature(lambda a, b=1: 0)) != key(inspect.signature(lambda a, b=2: 0))
    assert key(np.dtype("f4")) == key(np.dtype(np.float32)) != key(np.dtype("f8"))
    for v in (D("1.5"), F(1, 2), t1, pathlib.Path("a"), u, np.dtype("f4")):
        assert not key(v).identity and key(v).substitutable

    # A subclass is not on the list by its base's row: its own `==`, never substituted.
    class MyDecimal(decimal.Decimal):
        pass

    m = MyDecimal("1.0")
    assert es.intern(m) is m and key(m) != key(D("1.0"))


def test_jax_values_by_their_own_eq_within_the_type_and_substituted():
    # `K-jax-value`: JAX keys its own caches by these objects' `==`, so equal ones share a key
    # and `intern` hands out one of them (a user's own `==` class is never substituted).
    def sds(dtype: Any) -> Any:
        return jax.ShapeDtypeStruct((2, 3), dtype)

    first = sds(jnp.float32)
    assert es.intern(first) is first and es.intern(sds(jnp.float32)) is first
    assert key(sds(jnp.float32)) == key(first) != key(sds(jnp.int32))
    assert key(jax.ShapeDtypeStruct((3, 2), jnp.float32)) != key(first)
    assert es.intern(sds(jnp.int32)) is not first
    assert not key(first).identity and key(first).substitutable


def test_structured_dtypes_watched_never_substituted():
    a = np.dtype([("a", "f4"), ("b", "f4")])
    k = key(a)
    assert not k.substitutable
    a.names = ("x", "y")
    assert key(a) != k


@given(st.decimals(allow_nan=True), st.decimals(allow_nan=True))
def test_decimal_keys_equal_only_for_the_same_digits(a, b):
    same = a.as_tuple() == b.as_tuple()
    assert (key(a) == key(b)) == same


class Pair(NamedTuple):
    a: Any
    b: Any


@given(
    st.one_of(
        st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.booleans(), st.none()
    ),
)
def test_allowlisted_containers_of_values_stay_substitutable(v):
    for make in (lambda: (v, v), lambda: Pair(v, (v,)), lambda: Point((v,))):
        a, b = make(), make()
        assert key(a) == key(b) and key(a).substitutable and es.intern(b) is es.intern(a)


#
# Reproductions from the generative zoo (`tests/differential`'s zoo helper), one test each.
#


@pytest.mark.counts_traces
@pytest.mark.filterwarnings("ignore:A JAX array is being set as static")
def test_zoo_numpy_void_changed_in_place_is_retraced():
    class Box(eqx.Module):
        v: Any = eqx.field(static=True)

    @es.filter_jit
    def f(box, x):
        return x * float(box.v["a"])

    arr = np.zeros(1, dtype=[("a", "f8"), ("b", "f8")])
    arr[0]["a"] = 1.0
    v = arr[0]
    box = Box(v)
    assert float(f(box, jnp.ones(()))) == 1.0
    v["a"] = 5.0
    assert float(f(box, jnp.ones(()))) == 5.0
    assert es.intern(v) is v


class Weighted(enum.Enum):
    RED = 1

    @property
    def weight(self):
        return getattr(type(self), "scale", 1.0) * self.value


@pytest.mark.counts_traces
def test_zoo_enum_class_attribute_assigned_is_retraced():
    @es.filter_jit
    def f(c, x):
        return x * c.weight

    try:
        assert float(f(Weighted.RED, jnp.ones(()))) == 1.0
        Weighted.scale = 3.0  # pyright: ignore[reportAttributeAccessIssue]
        assert float(f(Weighted.RED, jnp.ones(()))) == 3.0
    finally:
        del Weighted.scale  # pyright: ignore[reportAttributeAccessIssue]
    assert not key(Weighted.RED).identity


@pytest.mark.counts_traces
def test_zoo_frozen_eq_false_handles_keep_their_table_entries():
    table = {}
    first, second = Handle(1.0), Handle(1.0)
    table[first] = 100.0
    f = es.filter_jit(lambda h, x: x * (h.value + table.get(h, 0.0)))
    assert float(f(first, jnp.ones(()))) == 101.0
    assert float(f(second, jnp.ones(()))) == 1.0
    assert es.intern(second) is second


class ScaledLeftOut:
    def __init__(self, a, scale):
        self.a, self.scale = a, scale

    def __eq__(self, other):
        return type(other) is type(self) and (self.a, self.scale) == (other.a, other.scale)

    def __hash__(self):
        return hash(self.a)

    def __getstate__(self):
        return {"a": self.a}

    def __call__(self, x):
        return x * self.a * self.scale


@pytest.mark.counts_traces
def test_zoo_getstate_leaving_out_an_attribute_is_not_the_key():
    one, two = ScaledLeftOut(1.0, 2.0), ScaledLeftOut(1.0, 3.0)
    assert es.intern(two) is two and key(one) != key(two)
    f = es.filter_jit(lambda g, x: g(x))
    assert float(f(one, jnp.ones(()))) == 2.0
    assert float(f(two, jnp.ones(()))) == 3.0


def test_own_canonical_forms_by_value():
    # eqxstable's own frozen dataclasses (`K-frozen-dataclass`): the node data of a `filter_jit`
    # wrapper (its function's static part and its options), compared by value, so that wrappers
    # of equivalent functions have equal structures.
    def make(scale):
        return lambda x: x * scale

    a, b = es.filter_jit(make(2.0))._aux, es.filter_jit(make(2.0))._aux
    assert a is not b and key(a) == key(b) and key(a).substitutable
    assert key(a) != key(es.filter_jit(make(2))._aux)
    assert key(a) != key(es.filter_jit(make(2.0), donate="all")._aux)


def test_c_objects_with_hidden_state_are_identity():
    counter, other = itertools.count(), itertools.count()
    f = (lambda c: lambda x: x + next(c))(counter)
    g = (lambda c: lambda x: x + next(c))(other)
    assert key(counter) == key(counter) and key(counter) != key(other)
    assert key(f) != key(g) and es.intern(other) is other and key(f).identity
    # A C class's instances that hold state are never constants, whether or not the class is a
    # heap type (a lock is one on every Python; `itertools`' classes since Python 3.12).
    lock = threading.Lock()
    assert key(lock).identity and key(itertools.repeat(1)).identity
    assert key((lambda: lambda: lock.locked())()).identity


def test_treedefs_by_node_data_type_exactly():
    assert key(jax.tree_util.tree_structure({"a": 1})) == key(
        jax.tree_util.tree_structure({"a": 2})
    )
    assert key(jax.tree_util.tree_structure((1, 2))) != key(jax.tree_util.tree_structure([1, 2]))
    assert key(jax.tree_util.tree_structure((1,))) != key(jax.tree_util.tree_structure((1, 2)))


SCALE = 2.0


class WithProperty:
    @property
    def scale(self):
        return SCALE


def test_descriptors_by_the_functions_they_run():
    prop = WithProperty.__dict__["scale"]
    fget = types.FunctionType(prop.fget.__code__, globals())
    fget.__qualname__ = prop.fget.__qualname__  # Python 3.10 takes it from `co_name`.
    twin = property(fget)
    assert key(prop) == key(twin) and key(prop) != key(property(lambda self: SCALE))
    before = key(prop)
    globals()["SCALE"] = 3.0
    try:
        assert key(prop) != before
    finally:
        globals()["SCALE"] = 2.0


@pytest.mark.counts_traces
def test_zoo_environ_and_ctypes_as_static_arguments_changed(monkeypatch):
    monkeypatch.setenv("EQXS_TEST_V", "2")
    f = es.filter_jit(lambda env, x: x * float(env["EQXS_TEST_V"]))
    assert float(f(os.environ, jnp.ones(()))) == 2.0
    os.environ["EQXS_TEST_V"] = "7"
    assert float(f(os.environ, jnp.ones(()))) == 7.0
    g = es.filter_jit(lambda v, x: x * v.value)
    v = ctypes.c_double(1.0)
    assert float(g(v, jnp.ones(()))) == 1.0
    v.value = 2.0
    assert float(g(v, jnp.ones(()))) == 2.0


def reads_library_dict(x):
    return x * len(logging._levelToName)


def reads_jax_config(x):
    return x * (2 if jax.config.jax_enable_x64 else 1)  # pyright: ignore[reportAttributeAccessIssue]


def test_library_module_data_dicts_and_config_objects(monkeypatch):
    before = key(reads_library_dict)
    assert key(reads_library_dict) == before
    monkeypatch.setitem(logging._levelToName, 99, "NINETY-NINE")
    assert key(reads_library_dict) != before
    # A config object: itself and its attributes one level deep, watched; never walked whole.
    k = key(reads_jax_config)
    assert key(reads_jax_config) == k
    _, watch = compute(reads_jax_config)
    assert watch.valid() and len(watch) < 20


class ShiftTZ(datetime.tzinfo):
    def __init__(self, hours):
        self.hours = hours

    def utcoffset(self, dt):
        return datetime.timedelta(hours=self.hours)

    def tzname(self, dt):
        return "shift"

    def dst(self, dt):
        return datetime.timedelta(0)


@pytest.mark.counts_traces
def test_zoo_datetime_with_a_user_tzinfo_changed():
    tz = ShiftTZ(1.0)
    when = datetime.datetime(2020, 1, 1, 12, tzinfo=tz)

    def f(x, when=when):
        return x * (when.utcoffset().total_seconds() / 3600)  # pyright: ignore[reportOptionalMemberAccess]

    g = es.filter_jit(f)
    assert float(g(jnp.ones(()))) == 1.0
    tz.hours = 2.0
    assert float(g(jnp.ones(()))) == 2.0
    twin = datetime.datetime(2020, 1, 1, 12, tzinfo=ShiftTZ(2.0))
    assert key(twin) != key(when) and es.intern(twin) is not when


class SlottedFloat(float):
    __slots__ = ("w",)


class ScaledInt(int):
    scale = 1.0


def test_zoo_builtin_subclasses_slots_and_class_attributes():
    a, b = SlottedFloat(1.0), SlottedFloat(1.0)
    a.w, b.w = 1.0, 2.0
    assert key(a) != key(b) and es.intern(b).w == 2.0
    before = key(a)
    a.w = 3.0
    assert key(a) != before
    n = ScaledInt(1)
    before = key(n)
    ScaledInt.scale = 2.0
    try:
        assert key(n) != before
    finally:
        ScaledInt.scale = 1.0
