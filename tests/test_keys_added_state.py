"""A subclass of a kind on the allowlist that adds state of its own (slots, however declared) or
behaviour (methods that read globals or class attributes) is keyed by that state and by its
class, watched: two objects that compute differently never share a key, a program or a canonical
instance, and a change that the trace reads is seen."""

import dataclasses
import functools as ft
import weakref
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import pytest

import eqxstable as es


ONE = jnp.float32(1.0)


class _Scaled(float):
    # One string is one slot: `type.__new__` does not iterate it as characters.
    __slots__ = "scale"


def _scaled(scale: float) -> _Scaled:
    out = _Scaled(1.0)
    out.scale = scale
    return out


class _Holder:
    __slots__ = "scale"

    def __init__(self, scale: float):
        self.scale = scale


@pytest.mark.counts_traces
def test_a_slot_declared_as_one_string():
    assert es.stable_key(_scaled(2.0)) != es.stable_key(_scaled(3.0))
    first = _scaled(2.0)
    assert es.intern(first) is first
    assert es.intern(_scaled(3.0)) is not first
    traces = 0

    def f(x, s):
        nonlocal traces
        traces += 1
        return x * s * s.scale

    jf = es.filter_jit(f)
    assert [float(jf(ONE, _scaled(v))) for v in (2.0, 3.0)] == [2.0, 3.0]
    assert traces == 2
    holder = _Holder(2.0)
    g = es.filter_jit(lambda x, h: x * h.scale)
    assert float(g(ONE, holder)) == 2.0
    holder.scale = 3.0
    assert float(g(ONE, holder)) == 3.0


def test_a_private_slot_is_read_by_its_mangled_name():
    class Private:
        __slots__ = ("__scale",)

        def __init__(self, scale):
            self.__scale = scale

        def __call__(self, x):
            return x * self.__scale

    p = Private(2.0)
    g = es.filter_jit(lambda x, q: q(x))
    assert float(g(ONE, p)) == 2.0
    p._Private__scale = 3.0  # pyright: ignore[reportAttributeAccessIssue]
    assert float(g(ONE, p)) == 3.0


@dataclasses.dataclass(frozen=True)
class _Frozen:
    x: float

    def __call__(self, v):
        return v * self.x * self.extra  # pyright: ignore[reportAttributeAccessIssue]


class _FrozenWithSlot(_Frozen):
    # Not a field: set past the frozen `__setattr__`, as a `__post_init__` would.
    __slots__ = ("extra",)


def _with_slot(extra: float) -> _FrozenWithSlot:
    out = _FrozenWithSlot(1.0)
    object.__setattr__(out, "extra", extra)
    return out


class _Holds(es.StableModule):
    act: _FrozenWithSlot = eqx.field(static=True)

    def __call__(self, x):
        return self.act(x)


@pytest.mark.counts_traces
def test_a_frozen_dataclass_subclass_with_a_slot_of_its_own():
    assert es.stable_key(_with_slot(2.0)) != es.stable_key(_with_slot(3.0))
    assert es.stable_key(_with_slot(2.0)) == es.stable_key(_with_slot(2.0))
    first = _with_slot(2.0)
    assert es.intern(first) is first
    assert es.intern(_with_slot(3.0)) is not first
    # Built after one holding an equal-fielded object: eager, no jit, computes with its own.
    modules = (_Holds(_with_slot(2.0)), _Holds(_with_slot(7.0)))
    assert [float(m(1.0)) for m in modules] == [2.0, 7.0]
    traces = 0

    def f(v, b):
        nonlocal traces
        traces += 1
        return b(v)

    jf = es.filter_jit(f)
    assert [float(jf(ONE, _with_slot(e))) for e in (2.0, 3.0, 2.0)] == [2.0, 3.0, 2.0]
    assert traces == 2


_NT_SCALE = 2.0


class _Pair(NamedTuple):
    a: float

    def __call__(self, x):
        return x * self.a * _NT_SCALE


class _Pairs(NamedTuple):
    a: float

    def __call__(self, x):
        return x * self.a * _Pairs.K  # pyright: ignore[reportAttributeAccessIssue]


@pytest.mark.counts_traces
def test_a_namedtuple_reached_through_a_closure_keys_its_class():
    global _NT_SCALE
    traces = 0
    p = _Pair(1.0)

    def f(x):
        nonlocal traces
        traces += 1
        return p(x)

    jf = es.filter_jit(f)
    try:
        assert float(jf(ONE)) == 2.0
        _NT_SCALE = 3.0
        assert float(jf(ONE)) == 3.0
        _NT_SCALE = 3.0
        assert float(jf(ONE)) == 3.0
        assert traces == 2
    finally:
        _NT_SCALE = 2.0
    _Pairs.K = 2.0  # pyright: ignore[reportAttributeAccessIssue]
    q = _Pairs(1.0)
    g = es.filter_jit(lambda x: q(x))
    assert float(g(ONE)) == 2.0
    _Pairs.K = 5.0  # pyright: ignore[reportAttributeAccessIssue]
    assert float(g(ONE)) == 5.0
    # Values of one class still share: equal NamedTuples, rebuilt.
    assert es.stable_key(_Pair(1.0)) == es.stable_key(_Pair(1.0))
    assert es.intern(_Pair(4.0)) is es.intern(_Pair(4.0))


_SUB_SCALE = 2.0


class _ScaledPartial(ft.partial):
    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs) * _SUB_SCALE


class _Factors(frozenset):
    def factor(self):
        return _SUB_SCALE


class _Ref(weakref.ref):
    __slots__ = ("scale",)


def _identity(x):
    return x


@pytest.mark.counts_traces
def test_subclasses_with_methods_of_their_own_key_their_class():
    global _SUB_SCALE
    traces = 0

    def call(x, fn):
        nonlocal traces
        traces += 1
        return fn(x)

    jcall = es.filter_jit(call)
    jfactor = es.filter_jit(lambda x, s: x * s.factor())
    p, fs = _ScaledPartial(_identity), _Factors({1})
    try:
        assert float(jcall(ONE, p)) == 2.0 and float(jfactor(ONE, fs)) == 2.0
        _SUB_SCALE = 3.0
        assert float(jcall(ONE, p)) == 3.0 and float(jfactor(ONE, fs)) == 3.0
        # Rebuilt, equal: still shared.
        assert float(jcall(ONE, _ScaledPartial(_identity))) == 3.0
        assert traces == 2
    finally:
        _SUB_SCALE = 2.0
    assert es.stable_key(_ScaledPartial(_identity)) == es.stable_key(_ScaledPartial(_identity))
    a, b = _Factors({4}), _Factors({4})
    assert es.stable_key(a) == es.stable_key(b)
    # Its instances can take attributes later (`a.scale = 3.0`): never substituted
    # (`test_registry_self_reference.py`), keyed by value still.
    assert es.intern(a) is a and es.intern(b) is b


def test_a_weak_reference_subclass_keys_its_slots():
    target = _Factors({1})
    r = _Ref(target)
    r.scale = 2.0
    g = es.filter_jit(lambda x, ref: x * ref.scale)
    assert float(g(ONE, r)) == 2.0
    r.scale = 3.0
    assert float(g(ONE, r)) == 3.0


class _SlottedPartial(ft.partial):
    __slots__ = ("scale",)

    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs) * self.scale


class _SlottedSet(frozenset):
    __slots__ = ("scale",)


def _slotted_partial(scale: float) -> _SlottedPartial:
    out = _SlottedPartial(_identity)
    out.scale = scale
    return out


def _slotted_set(scale: float) -> _SlottedSet:
    out = _SlottedSet({1})
    out.scale = scale
    return out


def test_slots_a_partial_or_frozenset_subclass_adds_are_never_substituted():
    first, other = _slotted_partial(2.0), _slotted_partial(3.0)
    assert es.intern(first) is first and es.intern(other) is other
    assert float(es.intern(_slotted_partial(3.0))(1.0)) == 3.0
    a, b = _slotted_set(2.0), _slotted_set(3.0)
    assert es.intern(a) is a and es.intern(b) is b
    assert es.stable_key(_slotted_set(2.0)) == es.stable_key(_slotted_set(2.0))
    g = es.filter_jit(lambda x, f: f(x))
    assert [float(g(ONE, _slotted_partial(s))) for s in (7.0, 8.0)] == [7.0, 8.0]


_LIST_SCALE = 2.0


class _Widths(list):
    def scale(self):
        return _LIST_SCALE


class _Table(dict):
    pass


def test_container_subclasses_key_their_class_attributes_and_c_fields():
    global _LIST_SCALE
    import collections

    table = collections.defaultdict(lambda: 2.0)
    f = es.filter_jit(lambda x: x * table["k"])
    assert float(f(ONE)) == 2.0
    table.default_factory = lambda: 3.0
    table.pop("k")
    assert float(f(ONE)) == 3.0
    widths = _Widths([1.0])
    g = es.filter_jit(lambda x: x * widths.scale())
    try:
        assert float(g(ONE)) == 2.0
        _LIST_SCALE = 3.0
        assert float(g(ONE)) == 3.0
    finally:
        _LIST_SCALE = 2.0
    held = _Table(a=1)
    held.scale = 2.0  # pyright: ignore[reportAttributeAccessIssue]
    h = es.filter_jit(lambda x, d: x * d.scale)
    assert float(h(ONE, held)) == 2.0
    held.scale = 3.0  # pyright: ignore[reportAttributeAccessIssue]
    assert float(h(ONE, held)) == 3.0
