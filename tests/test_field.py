"""`es.field(dynamic=True)`: a swept Python hyperparameter compiles once, with Python's dtypes."""

import equinox as eqx
import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

import eqxstable as es

from .helpers import compile_log, counting_filter_jit


class Scale(es.StableModule):
    factor: float = es.field(dynamic=True)
    offset: int = es.field(dynamic=True, default=0)

    def __call__(self, x):
        return self.factor * x + self.offset


def test_sweep_compiles_once_with_the_right_dtype_and_values():
    run, traces = counting_filter_jit(lambda model, x: model(x))
    x = jnp.arange(3, dtype=jnp.float32)
    with compile_log() as log:
        for factor in (0.1, 0.25, 1.5, -3.0, 1e-3):
            out = run(Scale(factor, offset=2), x)
            assert out.dtype == jnp.float32  # A float32 model times a dynamic 0.1: float32.
            np.testing.assert_allclose(out, np.float32(factor) * np.arange(3.0) + 2, rtol=1e-6)
    assert traces() == 1
    assert log.count("run") == 1


def test_without_dynamic_every_value_recompiles():
    # The control: the same module with plain fields recompiles for every value.
    class Plain(eqx.Module):
        factor: float = eqx.field(static=True)

        def __call__(self, x):
            return self.factor * x

    run, traces = counting_filter_jit(lambda model, x: model(x))
    for factor in (0.1, 0.25, 1.5):
        run(Plain(factor), jnp.ones(2))
    assert traces() == 3


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_weak_typing_keeps_the_models_dtype(dtype):
    run, _ = counting_filter_jit(lambda model, x: model(x))
    out = run(Scale(0.5), jnp.ones(3, dtype=dtype))
    assert out.dtype == dtype
    np.testing.assert_allclose(out.astype(jnp.float32), 0.5)


def test_stored_values_read_back_as_assigned_outside_and_weak_arrays_inside_a_trace():
    m = Scale(0.1, offset=3)
    # Outside a trace: the Python numbers themselves.
    assert type(m.factor) is float and m.factor == 0.1
    assert type(m.offset) is int and m.offset == 3
    # Inside one: weakly typed scalars, as `jnp.asarray(0.1)` and `jnp.asarray(3)` are.
    factor, offset = eqx.filter_jit(lambda m: (m.factor, m.offset))(m)
    assert factor.weak_type and factor.dtype == jnp.float32 and factor.shape == ()
    assert float(factor) == pytest.approx(0.1)
    assert offset.weak_type and offset.dtype == jnp.int32 and int(offset) == 3


def test_bool_complex_and_non_scalars():
    class Values(eqx.Module):  # `es.field` works in a plain module too.
        flag: bool = es.field(dynamic=True)
        z: complex = es.field(dynamic=True)
        other: object = es.field(dynamic=True)

    arr = jnp.ones(2)
    m = Values(True, 1 + 2j, arr)
    assert m.flag is True and type(m.z) is complex and m.z == 1 + 2j
    flag, z = eqx.filter_jit(lambda m: (m.flag, m.z))(m)
    # A `bool` is an `int` to Python: traced as the weakly typed integer 1 (`_dynamic.py`).
    assert flag.dtype == jnp.int32 and flag.weak_type and int(flag) == 1
    assert z.weak_type and z.dtype == jnp.complex64 and complex(z) == 1 + 2j
    assert m.other is arr  # Anything but a Python scalar is kept as it is.
    assert Values(True, 1j, None).other is None


def test_composes_with_a_user_converter():
    class Rate(es.StableModule):
        percent: float = es.field(dynamic=True, converter=lambda v: v / 100)

    m = Rate(5)
    assert m.percent == 0.05


def test_dynamic_and_static_is_an_error():
    with pytest.raises(
        ValueError, match=r"`eqxstable.field\(dynamic=True, static=True\)`.*not both"
    ):
        es.field(dynamic=True, static=True)


@given(st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False, width=32))
def test_any_value_compiles_once(factor):
    out = _RUN(Scale(factor), jnp.ones(2, dtype=jnp.float32))
    np.testing.assert_allclose(out, np.float32(factor), rtol=1e-6)
    assert _TRACES() == 1


_RUN, _TRACES = counting_filter_jit(lambda model, x: model(x))
