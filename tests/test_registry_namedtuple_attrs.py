"""`intern` of a NamedTuple subclass holding an array and an instance attribute: never
substituted (its owner may change the attribute later); without attributes neither (a tuple
holding an array is the user's own, `_registry._canonical_copy`)."""

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


def test_intern_never_substitutes_one_holding_attributes():
    # Its `__dict__` is its own, and its owner may change it later: an equal twin elsewhere
    # holds another one, so `intern` returns each as it is (finding 17 of attack 8a).
    q = _scaled(2.0)
    r = es.intern(q)
    assert r is q and r.scale == 2.0
    twin = _scaled(2.0)
    assert es.stable_key(twin) == es.stable_key(q)
    assert es.intern(twin) is twin
    q.scale = 5.0
    assert twin(1.0) == es.intern(twin)(1.0) == 2.0
    other = es.intern(_scaled(3.0))
    assert other(1.0) == 3.0


def test_intern_of_one_without_attributes_is_itself():
    q = Scaled(np.array([1.0]))
    assert es.intern(q) is q
    assert es.intern(Scaled(np.array([1.0]))) is not q


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
