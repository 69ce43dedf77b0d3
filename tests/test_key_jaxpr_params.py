"""A jaxpr's equation parameters are keyed by value only where their kind is known to be a value
(`_jaxpr._param`): a `custom_jvp`'s or `custom_vjp`'s rule (JAX's `WrappedFun`) is itself, never
walked. A jaxpr made while an outer trace runs holds that trace in its JVP thunk; walking it cost
optimistix's implicit JVP a re-key of JAX's live tracing state at every call. The key still
changes with the rule: two jaxprs differing only in their JVP rule never share a key."""

import collections

import jax
import jax.numpy as jnp
from hypothesis import given, settings, strategies as st
from jax.extend import core as jcore

import eqxstable as es
from eqxstable._keys import compute


# JAX's tracing state: none of it may be watched (or reached) by a jaxpr's key.
_LIVE = {"DynamicJaxprTrace", "JaxprStackFrame", "TracingEqn", "Var", "EvalTrace"}


def _with_rule(scale: float):
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    f.defjvp(lambda p, t: (jnp.sin(p[0]), scale * jnp.cos(p[0]) * t[0]))
    return f


def test_a_jaxpr_made_inside_a_trace_watches_nothing_of_the_trace():
    f = _with_rule(1.0)
    found: collections.Counter = collections.Counter()
    keys = []

    def outer(x):
        jaxpr = jax.make_jaxpr(f)(x).jaxpr  # Made while `outer` is traced.
        key, watch = compute(jaxpr)
        keys.append(key)
        found.update(type(holder).__qualname__ for holder, _, _ in watch.states)
        found.update(type(holder).__module__ for holder, _, _ in watch.states)
        # The same jaxpr is one key.
        assert compute(jaxpr)[0] == key
        return x

    jax.jit(outer)(jnp.ones(3))
    assert keys and keys[0] is not None
    assert not _LIVE & set(found), found
    assert "jax._src.interpreters.partial_eval" not in found
    assert "WrappedFun" not in found


def test_jaxprs_differing_only_in_their_jvp_rule_never_share_a_key():
    x = jnp.ones(3)
    one = jax.make_jaxpr(_with_rule(1.0))(x)
    two = jax.make_jaxpr(_with_rule(2.0))(x)
    # The programs differ only in their rule: the primal computation is the same.
    assert str(one) == str(two)
    assert es.stable_key(one) != es.stable_key(two)
    assert es.stable_key(one.jaxpr) != es.stable_key(two.jaxpr)
    assert es.stable_key(one) == es.stable_key(one)


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([1.0, 2.0, -0.0, 0.0]), st.sampled_from([1.0, 2.0, -0.0, 0.0]))
def test_equal_keys_give_equal_derivatives(a, b):
    # The property the key exists for: equal keys mean the same derivatives, bit for bit.
    x = jnp.linspace(0.1, 1.0, 3)
    ja, jb = jax.make_jaxpr(_with_rule(a))(x), jax.make_jaxpr(_with_rule(b))(x)

    def derivative(closed):
        def run(v):
            return jcore.jaxpr_as_fun(closed)(v)[0].sum()

        return jax.grad(run)(x)

    if es.stable_key(ja) == es.stable_key(jb):
        assert (derivative(ja) == derivative(jb)).all()
    assert (derivative(ja) == a * jnp.cos(x)).all()


SCALE = 1.0


def test_a_custom_vjp_rule_of_the_users_is_keyed_by_what_it_reads():
    @jax.custom_vjp
    def g(x):
        return jnp.sin(x)

    g.defvjp(lambda x: (jnp.sin(x), x), lambda res, ct: (SCALE * jnp.cos(res) * ct,))
    closed = jax.make_jaxpr(g)(jnp.ones(3))
    before = es.stable_key(closed)
    global SCALE
    SCALE = 2.0
    try:
        # The `bwd` rule runs at each transpose and reads `SCALE` then: a new key.
        assert es.stable_key(closed) != before
    finally:
        SCALE = 1.0
    assert es.stable_key(closed) == before


class _Holder:
    """An object of a kind no row of the parameter allowlist names."""

    def __init__(self, data):
        self.data = data


_echo = jcore.Primitive("eqxstable_test_echo")
_echo.def_abstract_eval(lambda x, **params: x)


def _bound(**params):
    return jax.make_jaxpr(lambda x: _echo.bind(x, **params))(jnp.ones(2))


def test_a_parameter_of_an_unknown_kind_is_itself_never_walked():
    holder = _Holder([1, 2])
    key, watch = compute(_bound(obj=holder))
    assert key is not None
    watched = {type(h) for h, _, _ in watch.states}
    # Neither the object nor what it holds is walked or watched.
    assert _Holder not in watched and list not in watched, watched
    # Two equal-looking objects are two keys; the same object is one.
    assert es.stable_key(_bound(obj=holder)) == es.stable_key(_bound(obj=holder))
    assert es.stable_key(_bound(obj=holder)) != es.stable_key(_bound(obj=_Holder([1, 2])))


def test_parameters_of_value_kinds_are_keyed_by_value():
    def fn(x):
        return x + 1

    def other(x):
        return x + 2

    one = _bound(fn=fn, dims=((0,), (1,)), dtype=jnp.dtype("float32"), name="a")
    again = _bound(fn=fn, dims=((0,), (1,)), dtype=jnp.dtype("float32"), name="a")
    assert es.stable_key(one) == es.stable_key(again)
    for changed in (
        _bound(fn=other, dims=((0,), (1,)), dtype=jnp.dtype("float32"), name="a"),
        _bound(fn=fn, dims=((0,), (2,)), dtype=jnp.dtype("float32"), name="a"),
        _bound(fn=fn, dims=((0,), (1,)), dtype=jnp.dtype("float16"), name="a"),
        _bound(fn=fn, dims=((0,), (1,)), dtype=jnp.dtype("float32"), name="b"),
    ):
        assert es.stable_key(changed) != es.stable_key(one)
