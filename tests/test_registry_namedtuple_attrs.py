"""`intern` of a NamedTuple subclass holding an array and an instance attribute: the read-only
copy it returns keeps the attribute, which the subclass's methods read."""

from typing import Any, NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es


class _Base(NamedTuple):
    a: Any


class Scaled(_Base):
    # Set on each instance (its `__dict__`), not a field.
    scale: float

    def __call__(self, x):
        return x * self.scale * self.a[0]


def _scaled(scale):
    q = Scaled(np.array([1.0]))
    q.scale = scale
    return q


def test_intern_keeps_the_instance_dict():
    q = _scaled(2.0)
    r = es.intern(q)
    assert r.scale == 2.0
    assert not r.a.flags.writeable
    assert r(1.0) == q(1.0) == 2.0
    other = es.intern(_scaled(3.0))
    assert other(1.0) == 3.0


class Holder(es.StableModule):
    f: Any = eqx.field(static=True)

    def __call__(self, x):
        return self.f(x)


@pytest.mark.filterwarnings("ignore:A JAX array is being set as static")
def test_static_field_holding_it_computes_as_eager():
    for scale in (2.0, 3.0, 2.0):
        m = Holder(_scaled(scale))
        assert float(m(1.0)) == scale
        assert float(eqx.filter_jit(lambda m, x: m(x))(m, jnp.float32(1.0))) == scale
