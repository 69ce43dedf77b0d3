"""A static field holding an object of a user class with its own `__eq__`/`__hash__` is compared
with that `==`, type-exactly, as Equinox compares it, and never substituted (CONTRACT sections 1
and 2; attack5b finding 03): a rebuilt `StableModule` hits plain `equinox.filter_jit` exactly
where an `equinox.Module` does, and each module reads its own object.
"""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es

from .helpers import counting_filter_jit


class Cfg:
    def __init__(self, v, log=None):
        self.v = v
        self.log = [] if log is None else log  # Its own list: equal objects, not the same.

    def __eq__(self, other):
        return type(other) is Cfg and other.v == self.v

    def __hash__(self):
        return hash(self.v)


class SubCfg(Cfg):
    pass


def _count(base: type) -> tuple[Any, Any, Any]:
    class Model(base):
        cfg: Any = eqx.field(static=True)
        w: Any

    step, traces = counting_filter_jit(lambda m, x: m.w * x * m.cfg.v)

    return Model, step, lambda: traces()


@pytest.mark.counts_traces
@pytest.mark.parametrize("base", [eqx.Module, es.StableModule])
def test_rebuilt_module_is_one_program_as_in_equinox(base):
    Model, step, traces = _count(base)
    for _ in range(6):
        np.testing.assert_allclose(step(Model(Cfg(2), jnp.ones(2)), jnp.ones(2)), 2.0)
    assert traces() == 1
    assert Model(Cfg(2), jnp.ones(2)) == Model(Cfg(2), jnp.ones(2))
    np.testing.assert_allclose(step(Model(Cfg(3), jnp.ones(2)), jnp.ones(2)), 3.0)
    assert traces() == 2


@pytest.mark.counts_traces
def test_compared_type_exactly():
    # `SubCfg(2) == Cfg(2)` by the user's own `==`... not here (`type(other) is Cfg` fails
    # for a `SubCfg`), but an `==` that accepted it still never shares across types.
    class Loose(Cfg):
        def __eq__(self, other):
            return isinstance(other, Cfg) and other.v == self.v

        __hash__ = Cfg.__hash__

    class LooseSub(Loose):
        pass

    Model, step, traces = _count(es.StableModule)
    step(Model(Loose(2), jnp.ones(2)), jnp.ones(2))
    step(Model(LooseSub(2), jnp.ones(2)), jnp.ones(2))
    assert traces() == 2


def test_never_substituted():
    class Model(es.StableModule):
        cfg: Any = eqx.field(static=True)

    first, second = Cfg(2), Cfg(2)
    a, b = Model(first), Model(second)
    assert a.cfg is first and b.cfg is second
    a.cfg.log.append("a")
    assert b.cfg.log == [] and first.log == ["a"]
    assert a == b and hash(a) == hash(b)
    # In a container too.
    c, d = Model((Cfg(1), [Cfg(4)])), Model((Cfg(1), [Cfg(4)]))
    assert c == d and c.cfg[0] is not d.cfg[0]


@settings(max_examples=25, deadline=None)
@given(a=st.integers(-3, 3), b=st.integers(-3, 3))
def test_equal_exactly_when_the_users_eq_says(a, b):
    class Model(es.StableModule):
        cfg: Any = eqx.field(static=True)

    assert (Model(Cfg(a)) == Model(Cfg(b))) == (a == b)
    assert (Model([Cfg(a)]) == Model([Cfg(b)])) == (a == b)


class Raises:
    def __eq__(self, other):
        raise RuntimeError("no")

    def __hash__(self):
        return 0


def test_an_eq_that_raises_is_unequal_not_a_crash():
    class Model(es.StableModule):
        cfg: Any = eqx.field(static=True)

    a, b = Model(Raises()), Model(Raises())
    assert a != b
    assert a == a


def test_stable_keys_of_rebuilt_modules():
    # `es.filter_jit` keys a module reached through a function or another module's field by
    # its fields: a rebuilt one is the same key, whether a field holds its own object (compared
    # by its own `==`) or a list read back as a fresh copy (keyed by its canonical form).
    class Conf:  # No list of its own: `stable_key` keys its attributes too (section 1).
        def __init__(self, v):
            self.v = v

        def __eq__(self, other):
            return type(other) is Conf and other.v == self.v

        def __hash__(self):
            return hash(self.v)

    class Model(es.StableModule):
        cfg: Any = eqx.field(static=True)

    assert es.stable_key(Model(Conf(2))) == es.stable_key(Model(Conf(2)))
    assert es.stable_key(Model(Conf(2))) != es.stable_key(Model(Conf(3)))
    assert es.stable_key(Model([1, 2])) == es.stable_key(Model([1, 2]))
    assert es.stable_key(Model([1, 2])) != es.stable_key(Model([1, 2.0]))
