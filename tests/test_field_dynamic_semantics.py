"""What a dynamic field computes with inside a trace agrees with the eager call (CONTRACT section
2, `es.field(dynamic=True)`; `eqxstable/_module/_dynamic.py`'s table).

- A `bool` is an `int` to Python: `flag_a + flag_b` is 2 and `~flag` is -2 under `jit` too
    (finding attack8a-02: a JAX bool made them a logical OR and NOT).
- A finite float that float32 cannot hold (`1e200`, `1e-200`) is kept static, never traced as
    `inf` or 0 (finding attack8a-03: `1e200 * 1e-200` was NaN under `jit`, 1.0 eagerly).
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

import eqxstable as es


class Flags(es.StableModule):
    a: bool = es.field(dynamic=True)
    b: bool = es.field(dynamic=True)

    def __call__(self, x):
        a, b = self.a, self.b
        return jnp.stack(
            [
                x * (a + b),
                x * ~a,
                x * -a,
                x * (a * 3),
                x * (a & b),
                x * (a | b),
                x * (a ^ b),
                x * (a == b),
                x * (a < b),
                jnp.where(a, x, 2 * x),
                jax.lax.cond(a, lambda: x, lambda: -x),
            ]
        )


_eqx = eqx.filter_jit(lambda m, x: m(x))
_es = es.filter_jit(lambda m, x: m(x))


@settings(deadline=None, max_examples=8)
@given(st.booleans(), st.booleans())
def test_bool_fields_compute_as_python_bools_under_jit(a, b):
    x = jnp.float32(1.5)
    model = Flags(a, b)
    eager = np.asarray(model(x))
    plain = np.asarray(Flags.__call__(_Plain(a, b), x))  # pyright: ignore[reportArgumentType]
    np.testing.assert_array_equal(eager, plain)
    np.testing.assert_array_equal(np.asarray(_eqx(model, x)), plain)
    np.testing.assert_array_equal(np.asarray(_es(model, x)), plain)


class _Plain:
    """The same values as plain Python bools, for `Flags.__call__`."""

    def __init__(self, a: bool, b: bool):
        self.a, self.b = a, b


class Product(es.StableModule):
    a: float = es.field(dynamic=True)
    b: float = es.field(dynamic=True)

    def __call__(self, x):
        return x * (self.a * self.b)


_F32 = np.finfo(np.float32)
# Finite floats out of float32's range, whose partner `scale / big` is out of range too (a
# static Python float mixed with a traced value is converted as JAX converts any Python float).
_big = st.floats(1e45, 1e300)
_tiny = st.floats(1e-300, 1e-45)


@settings(deadline=None, max_examples=15)
@given(st.one_of(_big, _tiny), st.floats(1e-3, 1e3))
def test_a_float_out_of_float32_range_is_never_traced_as_inf_or_zero(big, scale):
    x = jnp.float32(1.0)
    model = Product(big, scale / big)
    want = float(x * (big * (scale / big)))  # Python arithmetic, then float32: as eager.
    assert float(model(x)) == want
    assert float(_eqx(model, x)) == want
    assert float(_es(model, x)) == want
    stored: Any = model.__dict__
    assert type(stored["a"]) is float and type(stored["b"]) is float  # Static, as a big `int`.


def test_floats_in_float32_range_and_specials_stay_dynamic():
    from eqxstable._module._dynamic import Hyper

    for value in (0.0, -0.0, 0.1, 1e38, -1e-37, float("inf"), float("nan"), 1e-30 + 0j):
        assert type(Product(value, 1.0).__dict__["a"]) is Hyper, value
