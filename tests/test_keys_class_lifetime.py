"""Keying an object never keeps its class alive: a class made at run time (a namedtuple or a
dataclass made per call, a class from a factory) is freed once the program drops it, as it is
without eqxstable. The caches of what is computed from a class hold it weakly
(`_keys/_per_class.py`)."""

import collections
import dataclasses
import gc
import weakref
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es
from eqxstable._keys import compute
from eqxstable._keys._per_class import per_class, PerClass


def _classes() -> list[type]:
    NT = collections.namedtuple("NT", "a b")

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        a: int

    @dataclasses.dataclass
    class Node:
        a: int

    class Plain:
        pass

    class Slotted:
        __slots__ = ("x",)

        def __init__(self):
            self.x = 1.0

    class OwnEq:
        def __eq__(self, other):
            return type(other) is OwnEq

        def __hash__(self):
            return 0

    class Number(float):
        pass

    return [NT, Frozen, Node, Plain, Slotted, OwnEq, Number]


def _instances(classes: list[type]) -> list[Any]:
    NT, Frozen, Node, Plain, Slotted, OwnEq, Number = classes
    return [NT(1, 2), Frozen(1), Node(1), Plain(), Slotted(), OwnEq(), Number(1.5)]


def _dropped(use) -> list[str]:
    refs = []
    for _ in range(5):
        classes = _classes()
        use(_instances(classes))
        refs += [weakref.ref(c) for c in classes]
        del classes
    gc.collect()
    return sorted({c.__name__ for c in (r() for r in refs) if c is not None})


def test_keyed_classes_are_freed():
    assert _dropped(lambda xs: [es.stable_key(x) for x in xs]) == []


def test_classes_read_by_a_function_are_freed():
    def use(xs):
        def f(x):
            return x * len(xs)

        es.stable_key(f)

    assert _dropped(use) == []


def test_interned_classes_are_freed():
    # Only instances that support weak references: a canonical tuple (the namedtuple) or float
    # is held in a bounded table, by design.
    def use(xs):
        for x in xs:
            if not isinstance(x, (tuple, float)):
                es.intern(x)

    assert _dropped(use) == []


def test_stabilized_classes_are_freed():
    def use(xs):
        es.stabilize({"w": jnp.ones(2), "node": xs[2], "plain": xs[3]})

    assert _dropped(use) == []


def test_per_class_table():
    table: PerClass[int] = PerClass()
    table.put(int, 1)

    class C:
        pass

    table.put(C, 2)
    assert (table.get(id(int)), table.get(id(C)), table.get(id(float)), len(table)) == (
        1,
        2,
        None,
        2,
    )
    r = weakref.ref(C)
    del C
    gc.collect()
    assert r() is None
    assert len(table) == 1
    table.clear()
    assert len(table) == 0


def test_per_class_cache_is_a_cache():
    calls = []

    @per_class
    def name(cls: type) -> str:
        calls.append(cls)
        return cls.__name__

    class C:
        pass

    assert (name(C), name(C), name(int), name(int)) == ("C", "C", "int", "int")
    assert calls == [C, int]


class _ShadowingMeta(type):
    # A metaclass attribute named like `type`'s own does not fool the table.
    __flags__ = 0  # pyright: ignore[reportIncompatibleMethodOverride, reportAssignmentType]


def test_metaclass_shadowing_flags():
    class C(metaclass=_ShadowingMeta):
        pass

    ref = weakref.ref(C)
    es.stable_key(C())
    del C
    gc.collect()
    assert ref() is None


@pytest.mark.counts_traces
def test_keys_still_hit_after_classes_die():
    traces = 0

    @es.filter_jit
    def f(x, n):
        nonlocal traces
        traces += 1
        return x * n

    for _ in range(3):
        _dropped(lambda xs: [es.stable_key(x) for x in xs])
        assert jnp.array_equal(f(jnp.ones(2), 2), jnp.full(2, 2.0))
    assert traces == 1
    assert jax.numpy.ones(1).dtype == jnp.float32


class _Holder(es.StableModule):
    kind: type = eqx.field(static=True)


def _run_time_class(i: int) -> type:
    # Its own `__dict__` and `__weakref__` descriptors, and a slot's, each hold the class.
    base = type(f"Base{i}", (), {"table": np.zeros(1000)})
    return type(f"Layer{i}", (base,), {"__slots__": ("a", "b"), "scale": float(i)})


@pytest.mark.parametrize(
    "use", [es.stable_key, es.intern, _Holder], ids=["stable_key", "intern", "static_field"]
)
def test_a_class_keyed_as_a_value_is_freed(use):
    # attack 11c-15: the state watched for a class held its slot descriptors, and the key the
    # descriptors themselves, each holding the class: never freed.
    refs = []
    for i in range(5):
        cls = _run_time_class(i)
        use(cls)
        refs += [weakref.ref(cls), weakref.ref(cls.__mro__[1])]
        del cls
    # The first collection frees each class, and with it (by a weak reference's callback) the
    # key memo's entry, which held its bases: the second frees those.
    gc.collect()
    gc.collect()
    assert [r() for r in refs if r() is not None] == []


def test_a_class_keyed_as_a_value_stays_watched():
    cls = _run_time_class(0)
    key, watch = compute(cls)
    assert watch.valid() and watch.weak().weak_valid()
    assert compute(cls)[0] == key
    # The slot's name bound to something else: the class changed, and its key with it.
    cls.a = property(lambda self: 2.0)
    assert not watch.valid() and not watch.weak().weak_valid()
    assert compute(cls)[0] != key


def test_slot_descriptors_key_by_class_and_name():
    first, second = _run_time_class(0), _run_time_class(1)
    a = vars(first)["a"]
    assert es.stable_key(a) == es.stable_key(vars(first)["a"])
    assert es.stable_key(a) != es.stable_key(vars(first)["b"])
    assert es.stable_key(a) != es.stable_key(vars(second)["a"])
    base_a, base_b = first.__mro__[1], second.__mro__[1]
    assert es.stable_key(vars(base_a)["__weakref__"]) == es.stable_key(vars(base_a)["__weakref__"])
    assert es.stable_key(vars(base_a)["__weakref__"]) != es.stable_key(vars(base_b)["__weakref__"])
    assert es.stable_key(vars(base_a)["__weakref__"]) != es.stable_key(vars(base_a)["__dict__"])
