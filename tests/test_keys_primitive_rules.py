"""A primitive's rules are keyed as what they compute (`K-primitive`, attack round 11a, finding
03): a user's lowering, JVP, batching or transpose rule that reads a global (or a closure cell, a
default, a list it indexes) must be followed, as any function a trace reaches is. After what it
reads changes, a rebuilt function binding the primitive, the same function, a fresh wrapper and
even a miss with new code whose jaxpr is the same must all run the new rule, as `jax.jit` and
Equinox do; unchanged, a rebuilt reader is still the same program."""

import functools as ft
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, HealthCheck, settings, strategies as st
from jax.extend import core
from jax.interpreters import ad, batching, mlir

import eqxstable as es
from eqxstable._jit import _verify


K = 2.0
KS = [2.0]
_names = itertools.count()


def _k_global():
    return K


def _k_list():
    return KS[0]


def _set_global(v: float) -> None:
    global K
    K = v


def _set_list(v: float) -> None:
    KS[0] = v


def _cell():
    k = 2.0

    def get():
        return k

    def set_(v: float) -> None:
        nonlocal k
        k = v

    return get, set_


def _default():
    def get(k=2.0):
        return k

    def set_(v: float) -> None:
        get.__defaults__ = (v,)

    return get, set_


# How a rule reads the number it computes with, and how that number is changed in place.
MECHANISMS = {
    "global": lambda: (_k_global, _set_global),
    "global list": lambda: (_k_list, _set_list),
    "closure cell": _cell,
    "default": _default,
}


class _Batcher:
    """A batching rule as a callable object (its `__call__` reads what `get` reads)."""

    def __init__(self, p, get):
        self.p, self.get = p, get

    def __call__(self, args, dims):
        (x,), (d,) = args, dims
        return self.p.bind(x) + self.get(), d


def _jvp_rule(p, get, primals, tangents):
    (x,), (t,) = primals, tangents
    return p.bind(x), t * get()


def _primitive(table: str, get) -> core.Primitive:
    """A fresh primitive computing `2 x` whose `table` rule computes with `get()`."""
    p = core.Primitive(f"rules_p{next(_names)}")
    p.def_impl(lambda x: x * 2.0)
    p.def_abstract_eval(lambda x: x)
    doubled = mlir.lower_fun(lambda x: x * 2.0, multiple_results=False)
    mlir.register_lowering(p, doubled)
    if table == "lowering":
        mlir.register_lowering(p, mlir.lower_fun(lambda x: x * get(), multiple_results=False))
    elif table == "platform lowering":
        rule = mlir.lower_fun(lambda x: x * get(), multiple_results=False)
        mlir.register_lowering(p, rule, platform="cpu")
    elif table == "jvp":
        ad.primitive_jvps[p] = ft.partial(_jvp_rule, p, get)
    elif table == "batching":
        batching.primitive_batchers[p] = _Batcher(p, get)
    elif table == "transpose":
        ad.deflinear2(p, lambda ct, x: [ct * get()])
    return p


def _computation(table: str, p: core.Primitive):
    """A rebuilt function whose program runs `table`'s rule, and its value at `x` for `k`."""
    if table in ("jvp", "transpose"):
        return (lambda: jax.grad(lambda x: p.bind(x).sum())), lambda x, k: jnp.full_like(x, k)
    if table == "batching":
        return (lambda: jax.vmap(lambda x: p.bind(x))), lambda x, k: 2.0 * x + k
    return (lambda: lambda x: p.bind(x)), lambda x, k: x * k


TABLES = ["lowering", "platform lowering", "jvp", "batching", "transpose"]


@es.filter_jit
def _run(fn, x):
    return fn(x)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(TABLES),
    st.sampled_from(sorted(MECHANISMS)),
    st.lists(st.sampled_from([1.0, 2.0, 3.0, -0.5]), min_size=2, max_size=4),
)
def test_a_rule_reading_what_changed_is_a_new_program(table, mechanism, values):
    if table == "platform lowering" and jax.default_backend() != "cpu":
        pytest.skip("the rule is registered for the CPU")
    get, set_ = MECHANISMS[mechanism]()
    set_(2.0)
    p = _primitive(table, get)
    make, expected = _computation(table, p)
    x = jnp.arange(1.0, 4.0)
    same = make()
    # The very same function binding it, compiled before the change.
    np.testing.assert_array_equal(_run(same, x), expected(x, 2.0))
    for v in values:
        set_(v)
        want = np.asarray(expected(x, v))
        np.testing.assert_array_equal(jax.jit(make())(x), want)
        np.testing.assert_array_equal(_run(make(), x), want)
        np.testing.assert_array_equal(_run(same, x), want)
        np.testing.assert_array_equal(es.filter_jit(make())(x), want)
        np.testing.assert_array_equal(es.filter_jit(same)(x), want)


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_a_rule_s_key_follows_what_it_reads(mechanism):
    get, set_ = MECHANISMS[mechanism]()
    set_(2.0)
    p = _primitive("lowering", get)
    reader = eval("lambda x: rules_p.bind(x)", {"rules_p": p})
    before, before_reader = es.stable_key(p), es.stable_key(reader)
    set_(3.0)
    assert es.stable_key(p) != before
    assert es.stable_key(reader) != before_reader
    # Back to the value it read: equal again (by value, not by when).
    set_(2.0)
    assert es.stable_key(p) == before
    assert es.stable_key(reader) == before_reader


def test_a_miss_with_the_same_jaxpr_does_not_run_the_old_lowering():
    """Another function (a miss) whose trace is the same jaxpr must not be handed the program
    compiled with the rule's old global: the fingerprint holds the rule's key."""
    get, set_ = MECHANISMS["global"]()
    set_(2.0)
    p = _primitive("lowering", get)
    x = jnp.ones(2)
    np.testing.assert_array_equal(_run(lambda x: p.bind(x), x), [2.0, 2.0])
    set_(5.0)

    def other(x):
        y = p.bind(x)
        return y

    np.testing.assert_array_equal(_run(other, x), [5.0, 5.0])
    np.testing.assert_array_equal(jax.jit(other)(x), [5.0, 5.0])


def test_verify_mode_compares_the_rules():
    """Verify mode compares two traces' fingerprints (`_verify._same`): a jaxpr binding a
    primitive whose lowering reads a global that changed is not the same program."""
    get, set_ = MECHANISMS["global"]()
    set_(2.0)
    p = _primitive("lowering", get)
    closed = jax.make_jaxpr(lambda x: p.bind(x))(jnp.ones(2))
    before = _verify._fingerprint(closed)
    assert _verify._same(before, _verify._fingerprint(closed))
    set_(6.0)
    assert not _verify._same(before, _verify._fingerprint(closed))


@pytest.mark.counts_traces
@pytest.mark.parametrize("table", TABLES)
def test_unchanged_rules_keep_sharing_a_program(table):
    """A rule keyed by value costs nothing while what it reads stays: a rebuilt function binding
    the primitive is one trace, and after a change and back, the first program again."""
    get, set_ = MECHANISMS["global"]()
    set_(2.0)
    p = _primitive(table, get)
    make, expected = _computation(table, p)
    traces = 0

    @es.filter_jit
    def run(fn, x):
        nonlocal traces
        traces += 1
        return fn(x)

    x = jnp.arange(1.0, 4.0)
    for _ in range(3):
        np.testing.assert_array_equal(run(make(), x), expected(x, 2.0))
    assert traces == 1
    set_(3.0)
    np.testing.assert_array_equal(run(make(), x), expected(x, 3.0))
    assert traces == 2
    set_(2.0)
    np.testing.assert_array_equal(run(make(), x), expected(x, 2.0))
    assert traces == 2
