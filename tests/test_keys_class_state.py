"""What code reads of a class beyond its own namespace is in its key and watched (`K-user-class`,
`K-mutable`): attributes its metaclass serves, its names and bases, and an object's class
(`obj.__class__ = B`)."""

import equinox as eqx
import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


# Each example compiles: a few exact values (XLA on CPU flushes subnormals to zero).
_SCALES = st.sampled_from([-1.5, 0.5, 1.0, 2.0, 3.25])


@settings(max_examples=10)
@given(first=_SCALES, second=_SCALES)
def test_a_metaclass_attribute_read_through_the_class(first, second):
    class Meta(type):
        SCALE = first

    class C(metaclass=Meta):
        pass

    def reader():
        # A new function each time, from one definition: equivalent while `C` reads the same.
        return lambda x: x * C.SCALE

    x = jnp.float32(1.0)
    outs = {}
    for jit in (eqx.filter_jit, es.filter_jit):
        got = []
        for scale in (first, second):
            Meta.SCALE = scale
            got.append(float(jit(reader())(x)))
        outs[jit] = got
    assert (
        outs[es.filter_jit]
        == outs[eqx.filter_jit]
        == [
            float(jnp.float32(first)),
            float(jnp.float32(second)),
        ]
    )


@pytest.mark.counts_traces
def test_a_metaclass_attribute_assigned_after_the_trace():
    traces = 0

    class Meta(type):
        SCALE = 2.0

    class C(metaclass=Meta):
        pass

    def f(x):
        nonlocal traces
        traces += 1
        return x * C.SCALE

    wrapper = es.filter_jit(f)
    assert float(wrapper(jnp.float32(1.0))) == 2.0
    assert float(wrapper(jnp.float32(1.0))) == 2.0
    Meta.SCALE = 5.0
    assert float(wrapper(jnp.float32(1.0))) == 5.0
    assert traces == 2


class _A:
    def __call__(self, x):
        return x + 1


class _B:
    def __call__(self, x):
        return x + 2


class _Slotted:
    __slots__ = ("k",)

    def __init__(self):
        self.k = 1

    def __call__(self, x):
        return x + self.k


class _Slotted2:
    __slots__ = ("k",)

    def __call__(self, x):
        return x * 10 + self.k


@pytest.mark.parametrize("old, new", [(_A, _B), (_Slotted, _Slotted2)])
def test_an_object_whose_class_is_reassigned_runs_its_new_class(old, new):
    wrapper = es.filter_jit(lambda x, s: s(x))
    obj = old()
    x = jnp.float32(1.0)
    assert float(wrapper(x, obj)) == float(obj(x))
    obj.__class__ = new
    assert float(wrapper(x, obj)) == float(obj(x))
    assert es.stable_key(obj) != es.stable_key(old())


def test_a_class_renamed_or_rebased_is_another_key():
    class Base:
        scale = 1.0

    class Other:
        scale = 3.0

    class C(Base):
        pass

    before = es.stable_key(C)
    wrapper = es.filter_jit(lambda x: {type(c).__name__: x * c.scale})
    c = C()
    assert float(wrapper(jnp.float32(1.0))["C"]) == 1.0
    C.__name__ = "D"
    assert list(wrapper(jnp.float32(1.0))) == ["D"]
    assert es.stable_key(C) != before
    C.__bases__ = (Other,)
    assert float(wrapper(jnp.float32(1.0))["D"]) == 3.0


class _Matched:
    __match_args__ = ("a", "b")

    def __init__(self):
        self.a = 2.0
        self.b = 3.0


@pytest.mark.counts_traces
def test_dunder_data_of_a_class_reassigned():
    # `match` reads `__match_args__`, class data no method holds: reassigning it is a new key.
    traces = 0

    def f(x, p):
        nonlocal traces
        traces += 1
        match p:
            case _Matched(u, v):  # pyright: ignore[reportGeneralTypeIssues]
                return x * u + 0 * v
        return x

    jf = es.filter_jit(f)
    p = _Matched()
    one = jnp.float32(1.0)
    try:
        assert float(jf(one, p)) == 2.0
        _Matched.__match_args__ = ("b", "a")  # pyright: ignore[reportAttributeAccessIssue]
        assert float(jf(one, p)) == 3.0
        assert float(jf(one, p)) == 3.0
        assert traces == 2
    finally:
        _Matched.__match_args__ = ("a", "b")  # pyright: ignore[reportAttributeAccessIssue]
