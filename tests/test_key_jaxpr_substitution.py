"""When `es.intern` (and so `es.stabilize`) may hand out one jaxpr for another (`K-jaxpr`):
only when nothing either one reads can change. An equation's primitive is keyed as itself and
its attributes (JAX's rules, some with keyword-only defaults): any two equal keys hold that very
primitive, so it does not stop a substitution. A NumPy literal or constant can be the user's
array, which the jaxpr holds by reference: one that can be written stops it, and is watched."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jcore

import eqxstable as es
from eqxstable._keys._jaxpr_values import may_change


def _m():
    return jnp.arange(4.0).reshape(2, 2)


def _converted(body, m=None) -> Any:
    m = _m() if m is None else m
    return eqx.filter_closure_convert(lambda v: body(m, v), jnp.ones(2))


def _literals(jaxpr):
    return [x.val for e in jaxpr.eqns for x in e.invars if isinstance(x, jcore.Literal)]


@pytest.mark.counts_traces
def test_a_jaxpr_without_literals_is_shared_under_plain_equinox_after_stabilize():
    # `tanh(m @ v)` has no literal: all its key holds is its equations, whose primitives are
    # JAX's, keyed as themselves. Rebuilt three times, one program under plain Equinox.
    traces = 0

    @eqx.filter_jit
    def run(op, v):
        nonlocal traces
        traces += 1
        return op(v)

    v = jnp.array([1.0, 2.0])
    ops = [es.stabilize(_converted(lambda m, v: jnp.tanh(m @ v))) for _ in range(3)]
    assert not _literals(ops[0].jaxpr)
    assert ops[0].jaxpr is ops[1].jaxpr is ops[2].jaxpr
    for op in ops:
        np.testing.assert_allclose(run(op, v), np.tanh(_m() @ v), rtol=1e-6)
    assert traces == 1
    # Another computation is another key, and another program.
    other = es.stabilize(_converted(lambda m, v: jnp.sin(m @ v)))
    np.testing.assert_allclose(run(other, v), np.sin(_m() @ v), rtol=1e-6)
    assert traces == 2


def test_a_jaxpr_reading_a_users_writable_array_is_never_substituted():
    # JAX keeps the user's 0-d array as the literal itself (JAX 0.5.3) or a view of it (0.10):
    # writing it changes what the converted function computes, run eagerly. Substituted, `b`
    # would compute with `w1` ever after.
    w1, w2 = np.array(2.0, np.float32), np.array(2.0, np.float32)
    a = _converted(lambda m, v: m @ v * w1)
    b = _converted(lambda m, v: m @ v * w2)
    assert es.stable_key(a.jaxpr) == es.stable_key(b.jaxpr)
    assert not es.stable_key(b.jaxpr).substitutable
    es.intern(a.jaxpr)
    assert es.intern(b.jaxpr) is b.jaxpr
    sa, sb = es.stabilize(a), es.stabilize(b)
    assert sa.jaxpr is not sb.jaxpr
    v = jnp.ones(2)
    w2[...] = 5.0
    np.testing.assert_allclose(sb(v), _m() @ v * 5.0)
    np.testing.assert_allclose(sa(v), _m() @ v * 2.0)


def test_a_written_literal_is_a_new_key():
    # The literal's bytes are watched: a key remembered from before the write is not reused.
    w = np.array(2.0, np.float32)
    b = _converted(lambda m, v: m @ v * w)
    before = es.stable_key(b.jaxpr)
    w[...] = 5.0
    assert es.stable_key(b.jaxpr) != before


def test_a_writable_literal_like_array_is_not_substituted():
    # JAX's literal wrapper (an `ndarray` subclass on JAX >= 0.8; a plain array on 0.5.3, an
    # array at the top level, which `intern` copies) is writable: held on its own, a subclass
    # is never keyed by its bytes, nor substituted.
    val = _literals(_converted(lambda m, v: m @ v + 1.0).jaxpr)[0]
    assert val.flags.writeable and may_change(val)
    if type(val) is np.ndarray:
        pytest.skip("JAX 0.5.3 holds a plain NumPy array (K-array-top)")
    twin = val.copy()
    assert type(twin) is type(val)
    assert es.stable_key(twin) != es.stable_key(val)
    es.intern(val)
    assert es.intern(twin) is twin


class _Sub(np.ndarray):
    pass


def test_a_users_ndarray_subclass_stays_mutable_keyed():
    # A subclass may hold state of its own: read-only or not, it is never keyed by its bytes
    # alone, neither on its own nor as a jaxpr's constant.
    one = np.frombuffer(b"\0\0\0@", np.float32).view(_Sub)
    two = np.frombuffer(b"\0\0\0@", np.float32).view(_Sub)
    assert not one.flags.writeable
    assert es.stable_key(one) != es.stable_key(two)
    assert es.intern(two) is two
    assert may_change(one)


@pytest.mark.parametrize(
    ("make", "changes"),
    [
        (lambda: np.ones(2, np.float32), True),
        (lambda: _read_only(np.ones(2, np.float32)), True),  # its owner can make it writable
        (lambda: _read_only(np.ones(4, np.float32)[::2]), True),  # a view of a writable array
        (lambda: np.frombuffer(b"\0\0\0@\0\0\0@", np.float32), False),  # memory of a `bytes`
        (lambda: np.frombuffer(bytearray(8), np.float32), True),  # memory of a `bytearray`
        (lambda: jnp.ones(2), False),
        (lambda: np.float32(2.0), False),
        (lambda: np.zeros(1, "f4,i4")[0], True),  # a record: a view of the array's memory
    ],
    ids=[
        "writable",
        "read-only-owner",
        "read-only-view",
        "bytes",
        "bytearray",
        "jax-array",
        "numpy-scalar",
        "record",
    ],
)
def test_which_arrays_can_change(make, changes):
    assert may_change(make()) is changes


def _read_only(a):
    a.flags.writeable = False
    return a


class _NamedPrimitive(jcore.Primitive):
    # A primitive with an `==` of its own (by name): keyed by that `==`, not as itself, so two
    # equal keys may hold two primitives, and what they hold still stops a substitution.
    def __eq__(self, other):
        return type(other) is type(self) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


def _named(scale):
    p = _NamedPrimitive("scaled")

    def impl(x, *, k=scale):
        return x * k

    p.def_impl(impl)
    p.def_abstract_eval(lambda x: x)
    return p


def test_a_primitive_with_its_own_eq_still_stops_a_substitution():
    one, two = _named(2.0), _named(2.0)
    a = jax.make_jaxpr(lambda x: one.bind(x))(1.0)
    b = jax.make_jaxpr(lambda x: two.bind(x))(1.0)
    assert es.stable_key(a) == es.stable_key(b)
    assert not es.stable_key(b).substitutable
    es.intern(a)
    assert es.intern(b) is b
