"""Every per-class table is looked up by the class's identity, never by its metaclass's `==`
(`_keys/_per_class.py`): a metaclass that calls two classes equal (by name, as a notebook's
redefinition or a registry of specs does; or equal to everything, hashed as `int`) never makes a
class take another's handler, slots, or place in a table of types."""

import os
import sys
from typing import Any

import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._keys import _per_class


class ByName(type):
    def __eq__(cls, other):
        return isinstance(other, ByName) and cls.__name__ == other.__name__

    def __hash__(cls):
        return hash(cls.__name__)


class EqualToAll(type):
    # Equal to every class, and hashed as `int`: a lookup by `==` in a table of builtin types
    # would find `int`'s entry.
    def __eq__(cls, other):
        return True

    def __ne__(cls, other):
        return False

    def __hash__(cls):
        return hash(int)


@pytest.mark.counts_traces
def test_a_class_equal_by_name_has_its_own_slots():
    old_cls: Any = ByName("Scaler", (), {"__slots__": ("a",)})
    old = old_cls()
    old.a = 1.0
    es.stable_key(old)  # Remembers `old_cls`'s slots.
    new_cls: Any = ByName("Scaler", (), {"__slots__": ("a", "scale")})
    assert new_cls == old_cls and hash(new_cls) == hash(old_cls)
    n = new_cls()
    n.a = 1.0
    n.scale = 2.0
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x * n.scale

    jf = es.filter_jit(f)
    x = jnp.float32(1.0)
    assert float(jf(x)) == 2.0
    n.scale = 3.0
    assert float(jf(x)) == float(f(x)) == 3.0
    assert traces == 3  # Two traces, one eager call.
    k = es.stable_key(n)
    n.scale = 5.0
    assert es.stable_key(n) != k


@pytest.mark.counts_traces
def test_a_class_equal_to_int_is_not_keyed_as_int():
    cls: Any = EqualToAll("Box", (), {})
    assert cls == int and hash(cls) == hash(int)  # noqa: E721 (the point: its `==`)
    box = cls()
    box.scale = 2.0
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x * box.scale

    jf = es.filter_jit(f)
    x = jnp.float32(1.0)
    assert float(jf(x)) == 2.0
    box.scale = 3.0
    assert float(jf(x)) == float(f(x)) == 3.0
    assert traces == 3
    k = es.stable_key(box)
    box.scale = 4.0
    assert es.stable_key(box) != k
    # `intern` never treats it as a plain value.
    assert es.intern(box) is box


@pytest.mark.counts_traces
def test_a_run_of_ints_with_such_an_object_is_not_a_run_of_ints():
    # Eight `int`s and the object: the fast path for a run of one scalar type must not merge
    # its class with `int` (a set of the types themselves would).
    cls: Any = EqualToAll("Box", (), {})
    box = cls()
    box.scale = 2.0
    values: list[Any] = [1] * 8 + [box]
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x * values[-1].scale

    jf = es.filter_jit(f)
    x = jnp.float32(1.0)
    assert float(jf(x)) == 2.0
    box.scale = 3.0
    assert float(jf(x)) == float(f(x)) == 3.0
    assert traces == 3


@pytest.mark.parametrize("meta", [ByName, EqualToAll])
def test_no_lookup_asks_the_metaclass(meta):
    # Keying an object, its class and containers of them runs no `__eq__`/`__hash__` of the
    # metaclass: every table is looked up by identity.
    calls = []

    def called_from() -> None:
        # Called by eqxstable's own code (a table's lookup), not by `abc`'s caches, which any
        # `isinstance(x, Mapping)` consults the same way; nor by the hash of a finished key
        # (`_types.Key`), which tags a plain object with its class beside its identity and its
        # class's key (compared by identity), so that the class's `==` decides nothing there;
        # nor by the memo's choice to hold a watch state weakly or as it is (`_watch.py`, a scan
        # of the types in C), compared by `is` either way.
        caller = sys._getframe(2).f_code.co_filename
        if os.sep + "eqxstable" + os.sep in caller and not caller.endswith(
            ("_types.py", "_watch.py")
        ):
            calls.append(caller)

    class Counting(meta):
        def __eq__(self, other):
            called_from()
            return super().__eq__(other)

        def __hash__(self):
            called_from()
            return super().__hash__()

    made: list[Any] = [Counting("Thing", (), {"__slots__": ("v",)}) for _ in range(2)]
    objects = []
    for c in made:
        o = c()
        o.v = 1.0
        objects.append(o)
    for obj in [*objects, objects, tuple(objects), [1] * 8 + objects, {"k": objects[0]}]:
        es.stable_key(obj)
    es.stable_key(lambda: objects[0].v)
    assert calls == []


def test_per_class_table_entry_dies_with_its_class():
    import gc

    table: _per_class.PerClass[int] = _per_class.PerClass()
    cls: Any = ByName("Gone", (), {})
    table.put(cls, 1)
    twin = ByName("Gone", (), {})
    assert table.get(id(twin)) is None  # Equal by name, yet not the same class.
    i = id(cls)
    del cls
    gc.collect()
    assert i not in table and not table._finalizers
