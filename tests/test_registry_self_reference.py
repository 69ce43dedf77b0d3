"""`intern` never substitutes a function whose state reaches itself, nor a user's subclass of a
builtin value whose instances can take attributes later (attack round 12a, finding 03).

A function that reaches its own object (a closure cell or a default holding it, or another
function or tuple that does; a global holding it is in a namespace that two equivalent
functions share, so only one of them can reach itself so) may use that object as state
(`getattr(act, "temperature", 1.0)`); its owner may set it after `intern` ran
(`m2.act.temperature = 5.0`), which must change model 2 alone, as with `equinox.Module`. A
`str` subclass instance with a `__dict__` likewise (`m2.mode.factor = 4.0`). Both keep their
value keys: `es.filter_jit` shares one program for the rebuilt twins until one changes.
Functions that do not reach themselves are still substituted (one program under plain
`equinox.filter_jit`)."""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es

from .helpers import count_traces, counting_filter_jit


def _in_cell():
    def act(x):
        return x * getattr(act, "temperature", 1.0)

    return act


def _in_default():
    def act(x, me=None):
        return x * getattr(me, "temperature", 1.0)

    act.__defaults__ = (act,)
    return act


def _in_kwdefault():
    def act(x, *, me=None):
        return x * getattr(me, "temperature", 1.0)

    assert act.__kwdefaults__ is not None
    act.__kwdefaults__["me"] = act
    return act


def _through_helper():
    def temperature_of(f):
        return getattr(f, "temperature", 1.0)

    def act(x):
        return x * temperature_of(act)

    return act


def _through_tuple():
    def act(x):
        return x * getattr(held[0], "temperature", 1.0)

    held = (act,)
    return act


def _through_other_function():
    def act(x):
        return x * other()

    def other():
        return getattr(act, "temperature", 1.0)

    return act


_MAKERS = [
    _in_cell,
    _in_default,
    _in_kwdefault,
    _through_helper,
    _through_tuple,
    _through_other_function,
]


class Net(es.StableModule):
    act: Any

    def __call__(self, x):
        return self.act(x)


class StaticNet(es.StableModule):
    act: Any = eqx.field(static=True)

    def __call__(self, x):
        return self.act(x)


class PlainNet(eqx.Module):
    act: Any

    def __call__(self, x):
        return self.act(x)


def _build(how: str, act: Any) -> Any:
    if how == "stable":
        return Net(act)
    if how == "static":
        return StaticNet(act)
    if how == "stabilize":
        return es.stabilize(PlainNet(act))
    return PlainNet(es.intern(act))


@settings(max_examples=40)
@given(
    make=st.sampled_from(_MAKERS), how=st.sampled_from(["stable", "static", "stabilize", "intern"])
)
def test_tuning_model_2_leaves_model_1_as_eqx_module_does(make, how):
    x = jnp.ones(2)
    a, b = make(), make()
    assert es.stable_key(a) == es.stable_key(b)  # Equivalent, keyed by value.
    m1, m2 = _build(how, a), _build(how, b)
    p1, p2 = PlainNet(make()), PlainNet(make())
    assert m1.act is not m2.act
    m2.act.temperature = 5.0
    p2.act.temperature = 5.0
    assert float(m1(x)[0]) == float(p1(x)[0]) == 1.0
    assert float(m2(x)[0]) == float(p2(x)[0]) == 5.0


@pytest.mark.counts_traces
def test_es_filter_jit_shares_then_retraces_model_2_after_its_change():
    counter = count_traces(lambda m, x: m(x))
    run = es.filter_jit(counter)

    x = jnp.ones(2)
    m1, m2 = Net(_in_cell()), Net(_in_cell())
    assert float(run(m1, x)[0]) == float(run(m2, x)[0]) == 1.0
    assert counter.count == 1  # One program for the equivalent twins.
    m2.act.temperature = 5.0
    assert float(run(m2, x)[0]) == 5.0
    assert float(run(m1, x)[0]) == 1.0
    assert counter.count == 2


def _plain_maker():
    return lambda x: x * 2.0


def _recursive_maker():
    def fact(n):
        return 1 if n == 0 else n * fact(n - 1)

    return lambda x: x * fact(3)


@pytest.mark.counts_traces
def test_a_closure_over_a_recursive_helper_is_keyed_but_not_substituted():
    # The helper reaches itself (it may read its own attributes), and the closure's key holds
    # the helper's: a missed sharing under plain `eqx.filter_jit`, one program under
    # `es.filter_jit`.
    counter = count_traces(lambda m, x: m(x))
    run = es.filter_jit(counter)

    x = jnp.ones(2)
    a, b = Net(_recursive_maker()), Net(_recursive_maker())
    assert a.act is not b.act
    assert es.stable_key(a.act) == es.stable_key(b.act)
    assert float(run(a, x)[0]) == float(run(b, x)[0]) == 6.0
    assert counter.count == 1


def test_functions_that_do_not_reach_themselves_are_still_shared():
    run, traces = counting_filter_jit(lambda m, x: m(x))

    x = jnp.ones(2)
    a, b = Net(_plain_maker()), Net(_plain_maker())
    assert a.act is b.act
    assert float(run(a, x)[0]) == float(run(b, x)[0]) == 2.0
    assert traces() == 1


class Mode(str):
    pass


class Units(int):
    pass


class Scale(float):
    pass


class Gain(np.float32):
    pass


class Pair(tuple):
    pass


class SlotMode(str):
    __slots__ = ("factor",)


class Slotless(str):
    __slots__ = ()


_VALUES = [
    lambda: Mode("relu"),
    lambda: Units(3),
    lambda: Scale(1.5),
    lambda: Pair((1, 2)),
    lambda: SlotMode("relu"),
]


class ModeNet(es.StableModule):
    mode: Any = eqx.field(static=True)

    def __call__(self, x):
        return x * getattr(self.mode, "factor", 1.0)


class PlainModeNet(eqx.Module):
    mode: Any = eqx.field(static=True)

    def __call__(self, x):
        return x * getattr(self.mode, "factor", 1.0)


@settings(max_examples=30)
@given(make=st.sampled_from(_VALUES), how=st.sampled_from(["stable", "stabilize", "intern"]))
def test_a_builtin_subclass_that_can_take_attributes_is_never_substituted(make, how):
    x = jnp.ones(2)
    a, b = make(), make()
    assert es.stable_key(a) == es.stable_key(b)
    if how == "stable":
        m1, m2 = ModeNet(a), ModeNet(b)
    elif how == "stabilize":
        m1, m2 = es.stabilize(PlainModeNet(a)), es.stabilize(PlainModeNet(b))
    else:
        m1, m2 = PlainModeNet(es.intern(a)), PlainModeNet(es.intern(b))
    assert m1.mode is not m2.mode
    m2.mode.factor = 4.0
    assert float(m1(x)[0]) == 1.0
    assert float(m2(x)[0]) == 4.0


def test_a_numpy_scalar_subclass_that_can_take_attributes_is_never_substituted():
    a, b = Gain(1.5), Gain(1.5)
    assert es.stable_key(a) == es.stable_key(b)
    assert es.intern(a) is a and es.intern(b) is b


def test_a_slotless_builtin_subclass_is_still_substituted():
    assert es.intern(Slotless("relu")) is es.intern(Slotless("relu"))
