"""What a dynamic field reads back: the Python number assigned, exactly, outside a trace; a weak
JAX scalar inside one; and never a silent number after arithmetic over its stored words (attack5
findings 07 and 08)."""

import math
import struct
from typing import Any

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings

import eqxstable as es
from eqxstable._module._dynamic import encode, Hyper


class Knob(es.StableModule):
    weight: jax.Array
    value: Any = es.field(dynamic=True)


_INT32 = np.iinfo(np.int32)
ints = st.integers(int(_INT32.min), int(_INT32.max))
floats = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True) | st.sampled_from(
    [0.0, -0.0, 1e-30, 5e-324, 1e300, math.nan, -math.nan, 0.1]
)
numbers = (
    st.booleans()
    | ints
    | floats
    | st.complex_numbers(allow_nan=True, allow_infinity=True)
    | st.sampled_from([_INT32.max, _INT32.min, 100_000, -1, 0, True, False])
)


def _same(got: Any, want: Any) -> bool:
    """Exactly the same Python number: type, and bits (so `-0.0` and NaN payloads count)."""
    if type(got) is not type(want):
        return False
    if type(want) is float:
        return struct.pack("<d", got) == struct.pack("<d", want)
    if type(want) is complex:
        return _same(got.real, want.real) and _same(got.imag, want.imag)
    return got == want


@settings(max_examples=150, deadline=None)
@given(numbers)
def test_outside_a_trace_reads_back_the_assigned_number_exactly(value):
    model = Knob(jnp.ones(2), value)
    assert _same(model.value, value)
    assert _same(model.value, value)  # Read again: the checked value, kept on the node.


@settings(max_examples=30, deadline=None)
@given(ints, ints)
def test_python_arithmetic_between_int_fields_is_pythons(n, m):
    # Finding 07: `(n * n) // n` read from dynamic fields wrapped at 32 bits.
    a, b = Knob(jnp.ones(2), n), Knob(jnp.ones(2), m)
    assert a.value * b.value == n * m
    assert a.value**2 == n**2


def test_finding_07_outside_a_trace():
    n, eps = Knob(jnp.ones(2), 100_000).value, Knob(jnp.ones(2), 1e-30).value
    assert (n * n) // n == 100_000
    assert eps * eps / eps == 1e-30


def test_large_ints_stay_python_ints():
    for value in (2**31, -(2**31) - 1, 2**100):
        assert Knob(jnp.ones(2), value).value == value


@eqx.filter_jit
def _read(model):
    return model.value


@settings(max_examples=30, deadline=None)
@given(numbers)
def test_inside_a_trace_it_is_the_weak_scalar_jnp_asarray_gives(value):
    got = _read(Knob(jnp.ones(2), value))
    if type(encode(value)) is not Hyper:
        # A float that float32 would make `inf` or 0 is kept static (attack8a-03): read as it is.
        assert _same(got, value)
        return
    # A `bool` is traced as the weak integer 0 or 1, as Python's `bool` is an `int` (attack8a-02).
    want = jnp.asarray(int(value) if type(value) is bool else value)
    assert got.dtype == want.dtype and got.weak_type == want.weak_type and got.shape == ()
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    if type(value) is float and value == 0.0:  # The sign of zero survives.
        assert math.copysign(1.0, float(got)) == math.copysign(1.0, value)


@pytest.mark.counts_traces
def test_a_sweep_traces_once_per_kind():
    traces = 0

    @eqx.filter_jit
    def read(model):
        nonlocal traces
        traces += 1
        return model.value

    for value in (0.1, -0.0, 1e-30, math.nan):
        read(Knob(jnp.ones(2), value))
    for value in (1, -5, 100_000):
        read(Knob(jnp.ones(2), value))
    assert traces == 2


def _arrays(model):
    return eqx.partition(model, eqx.is_array)


def _stored_alike(v: Any, a: Any) -> bool:
    return type(v) is type(a) and type(encode(v)) is type(encode(a))


def _raises_or_reads(model: Any, *allowed: Any) -> None:
    """The contract after arithmetic over all array leaves: a clear error, or one of the values
    that were assigned (the first model's, as a plain field keeps it; either model's for an
    elementwise selection such as `jnp.maximum`), never a number made from the stored words."""
    try:
        got = model.value
    except ValueError as error:
        assert "`Knob.value`" in str(error) and "is_inexact_array" in str(error)
        return
    assert any(_same(got, want) for want in allowed), (got, allowed)


@settings(max_examples=60, deadline=None)
@given(numbers, numbers)
def test_the_sum_of_two_models_never_reads_as_a_silent_number(a, b):
    # Finding 08: summing two models' `eqx.is_array` leaves turned a dynamic 3 into a 6.
    if not _stored_alike(a, b) or type(encode(a)) is not Hyper:
        # Two kinds (or a float kept static): two PyTree structures, which `jax.tree.map`
        # refuses itself; two static floats are not array leaves at all.
        return
    x, static = _arrays(Knob(jnp.ones(2), a))
    y, _ = _arrays(Knob(jnp.ones(2), b))
    summed: Any = eqx.combine(jax.tree.map(lambda s, t: s + t, x, y), static)
    with pytest.raises(ValueError, match=r"`Knob\.value`.*no longer agree.*is_inexact_array"):
        _ = summed.value


def test_finding_08():
    x, static = _arrays(Knob(jnp.ones(2), 3))
    y, _ = _arrays(Knob(2 * jnp.ones(2), 3))
    summed: Any = eqx.combine(jax.tree.map(lambda s, t: s + t, x, y), static)
    with pytest.raises(ValueError, match=r"`Knob\.value` is a dynamic field.*Python int"):
        _ = summed.value


_INTEGER_OPS = {
    "double": lambda s, t: s * 2,
    "difference": lambda s, t: s - t,
    "midpoint": lambda s, t: s + (t - s) // 2,
    "mean": lambda s, t: (s + t) // 2,
    "zeros": lambda s, t: jnp.zeros_like(s),
    "ones": lambda s, t: jnp.ones_like(s),
    "negate": lambda s, t: -s,
    "xor": lambda s, t: s ^ t,
    "maximum": jnp.maximum,
    "select": lambda s, t: jnp.where(True, s, t),
    "plus_zero": lambda s, t: s + 0,
}


def _on_words(op, s, t):
    # The weights are floats; the integer operations apply to the stored words.
    return op(s, t) if jnp.issubdtype(s.dtype, jnp.integer) else s


@pytest.mark.parametrize("op", _INTEGER_OPS.values(), ids=list(_INTEGER_OPS))
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_integer_arithmetic_gives_the_right_value_or_a_clear_error(op, data):
    a = data.draw(numbers)
    # Of the same kind and stored the same way (a float out of float32's range is static).
    b = data.draw(st.sampled_from([a]) | numbers.filter(lambda v: _stored_alike(v, a)))
    x, static = _arrays(Knob(jnp.ones(2), a))
    y, _ = _arrays(Knob(jnp.ones(2), b))
    model = eqx.combine(jax.tree.map(lambda s, t: _on_words(op, s, t), x, y), static)
    allowed = (a, b) if op is jnp.maximum else (a,)
    _raises_or_reads(model, *allowed)


@pytest.mark.parametrize("op", [jnp.zeros_like, lambda s: s * 2, lambda s: s + 1])
@pytest.mark.parametrize("value", [0, 3, False, True, 0.0, -0.0, 0.5, 1j])
def test_arithmetic_that_changes_the_words_always_raises(op, value):
    x, static = _arrays(Knob(jnp.ones(2), value))
    model: Any = eqx.combine(jax.tree.map(op, x), static)
    with pytest.raises(ValueError, match=r"`Knob\.value`"):
        _ = model.value


@settings(max_examples=30, deadline=None)
@given(numbers)
def test_tree_at_on_another_field_keeps_the_value(value):
    model = Knob(jnp.ones(2), value)
    edited: Any = eqx.tree_at(lambda m: m.weight, model, jnp.zeros(2))
    assert _same(edited.value, value)
    np.testing.assert_array_equal(edited.weight, 0.0)


def test_tree_at_on_the_stored_leaf_is_checked():
    model = Knob(jnp.ones(2), 3)
    leaf = model.__dict__["value"].bits
    forged: Any = eqx.tree_at(lambda m: m.__dict__["value"].bits, model, leaf + 1)
    with pytest.raises(ValueError, match=r"`Knob\.value`"):
        _ = forged.value
    kept: Any = eqx.tree_at(lambda m: m.__dict__["value"].bits, model, jnp.copy(leaf))
    assert kept.value == 3
    del leaf


@settings(max_examples=30, deadline=None)
@given(numbers)
def test_optax_updates_over_trainable_leaves_keep_the_value(value):
    model: Any = Knob(jnp.ones(2), value)
    optim = optax.adamw(0.1, weight_decay=0.5)
    params = eqx.filter(model, eqx.is_inexact_array)
    state = optim.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    for _ in range(2):
        updates, state = optim.update(grads, state, eqx.filter(model, eqx.is_inexact_array))
        model = eqx.apply_updates(model, updates)
    assert _same(model.value, value)
    assert not np.allclose(model.weight, 1.0)


@pytest.mark.parametrize("update", [3.0, 0.0, 3, 0])
@settings(max_examples=20, deadline=None)
@given(value=numbers)
def test_optax_updates_over_all_array_leaves_never_give_a_silent_number(update, value):
    model: Any = Knob(jnp.ones(2), value)
    arrays, static = _arrays(model)
    try:
        # A float tree of updates over the stored words is refused as its node is built; an
        # integer one reaches `apply_updates`.
        updates = jax.tree.map(lambda s: jnp.full(s.shape, update), arrays)
        new: Any = eqx.combine(optax.apply_updates(arrays, updates), static)
    except ValueError as error:
        assert "`Knob.value`" in str(error) and "is_inexact_array" in str(error)
        return
    _raises_or_reads(new, value)


def test_a_model_out_of_a_jitted_step_reads_back_exactly():
    @eqx.filter_jit
    def step(model):
        return eqx.tree_at(lambda m: m.weight, model, model.weight * 2)

    model: Any = step(Knob(jnp.ones(2), 1e-30))
    assert _same(model.value, 1e-30)
    np.testing.assert_array_equal(model.weight, 2.0)
