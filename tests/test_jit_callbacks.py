"""A program that calls back into Python while it runs (a host callback) serves only the objects
that traced it (`eqxstable/_jit/_pinned.py`): an equivalent callback, which shares a key, traces
and compiles its own program, as under `equinox.filter_jit`, so that a change to one of them, or a
side effect of one, never shows in the other's results. Every result is compared with eager
JAX."""

# The callbacks keep their state in function attributes, as the adversary's did.
# pyright: reportFunctionMemberAccess=false

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

import eqxstable as es


_SDS = jax.ShapeDtypeStruct((3,), jnp.float32)


def _scaler():
    def cb(x):
        return np.asarray(x * cb.scale, dtype=np.float32)

    cb.scale = 2.0
    return cb


def _pure(x, cb):
    return jax.pure_callback(cb, _SDS, x)


def _io(x, cb):
    return io_callback(cb, _SDS, x)


def _in_linear_solve(x, cb):
    # `custom_linear_solve` keeps its jaxprs in a NamedTuple parameter.
    solve = lambda _, r: jax.pure_callback(cb, _SDS, r)  # noqa: E731
    return jax.lax.custom_linear_solve(lambda v: v, x, solve)


@pytest.mark.counts_traces
@pytest.mark.parametrize("kind", [_pure, _io, _in_linear_solve])
def test_an_equivalent_callback_never_runs_in_anothers_program(kind):
    traces = 0

    def body(x, cb):
        nonlocal traces
        traces += 1
        return kind(x, cb)

    stable, plain = es.filter_jit(body), eqx.filter_jit(lambda x, cb: kind(x, cb))
    x = jnp.ones(3)
    cb1, cb2 = _scaler(), _scaler()
    for f in (stable, plain):
        assert np.allclose(f(x, cb1), 2.0) and np.allclose(f(x, cb2), 2.0)
    # One trace of each callback object (as Equinox, which keys callables by identity).
    assert traces == 2
    cb1.scale = 5.0
    eager = cb2(np.ones(3, np.float32))
    assert np.allclose(stable(x, cb2), eager) and np.allclose(plain(x, cb2), eager)
    assert np.allclose(stable(x, cb1), 5.0) and np.allclose(plain(x, cb1), 5.0)
    # The same objects are hits: cb2 unchanged, cb1 traced again once for its new scale.
    assert np.allclose(stable(x, cb2), 2.0) and np.allclose(stable(x, cb1), 5.0)
    assert traces == 3
    assert stable.cache_info().traces == 3


@pytest.mark.counts_traces
def test_a_callbacks_side_effects_reach_its_own_object():
    # A callback that counts its own calls: calls passing the second must count there.
    def make():
        def cb(x):
            cb.calls += 1
            return np.asarray(x, dtype=np.float32)

        cb.calls = 0
        return cb

    traces = 0

    def body(x, cb):
        nonlocal traces
        traces += 1
        return io_callback(cb, _SDS, x)

    f = es.filter_jit(body)
    x = jnp.ones(3)
    cb1, cb2 = make(), make()
    f(x, cb1).block_until_ready()
    for _ in range(3):
        f(x, cb2).block_until_ready()
    assert (cb1.calls, cb2.calls) == (1, 3)
    # Each call changed `cb2.calls`, which its key holds: traced again each time (a miss of
    # kind "mutated"), never served by cb1's program.
    assert traces == 4


@pytest.mark.counts_traces
def test_wrappers_of_equivalent_functions_call_their_own_callbacks():
    # The callback is in the function's closure: wrappers of equivalent functions share a
    # program by key, yet each must run its own callback.
    def make(cb):
        return lambda x: jax.pure_callback(cb, _SDS, x)

    cb1, cb2 = _scaler(), _scaler()
    w1, w2 = es.filter_jit(make(cb1)), es.filter_jit(make(cb2))
    x = jnp.ones(3)
    assert np.allclose(w1(x), 2.0) and np.allclose(w2(x), 2.0)
    cb1.scale = 5.0
    assert np.allclose(w2(x), 2.0)
    assert np.allclose(w1(x), 5.0)
    # A new wrapper of the very same function reuses its program.
    w2_again = es.filter_jit(w2.__wrapped__)
    assert np.allclose(w2_again(x), 2.0)
    assert w2_again.cache_info().traces == 0


_CB = _scaler()


@pytest.mark.counts_traces
def test_a_global_callback_rebound_to_an_equivalent_one_is_traced_again():
    global _CB
    traces = 0

    def body(x):
        nonlocal traces
        traces += 1
        return jax.pure_callback(_CB, _SDS, x)

    f = es.filter_jit(body)
    x = jnp.ones(3)
    old = _CB
    try:
        assert np.allclose(f(x), 2.0) and traces == 1
        _CB = _scaler()  # An equal key: a hit for any other program.
        old.scale = 5.0  # The program traced with the old one must not run it any more.
        assert np.allclose(f(x), 2.0)
        assert traces == 2
        assert np.allclose(f(x), 2.0) and traces == 2
    finally:
        _CB = old
        old.scale = 2.0


@pytest.mark.counts_traces
def test_a_callback_in_a_static_field_is_pinned_to_its_module():
    class Model(eqx.Module):
        w: jax.Array
        cb: Any = eqx.field(static=True)

        def __call__(self, x):
            return self.w * jax.pure_callback(self.cb, _SDS, x)

    traces = 0

    def step(model, x):
        nonlocal traces
        traces += 1
        return model(x)

    f = es.filter_jit(step)
    x = jnp.ones(3)
    cb1, cb2 = _scaler(), _scaler()
    m1, m2 = Model(jnp.asarray(1.0), cb1), Model(jnp.asarray(1.0), cb2)
    assert np.allclose(f(m1, x), 2.0) and np.allclose(f(m2, x), 2.0)
    cb1.scale = 5.0
    assert np.allclose(f(m2, x), 2.0)
    assert traces == 2


@pytest.mark.counts_traces
def test_reuse_never_shares_a_program_that_calls_python():
    # Two closures over fresh equal dicts are two entries whose traces are equal by value: a
    # program is reused between them, unless it calls a Python object while it runs.
    def make(cb):
        d = {"a": 1.0}
        return lambda x: d["a"] * jax.pure_callback(cb, _SDS, x)

    cb1, cb2 = _scaler(), _scaler()
    w1, w2 = es.filter_jit(make(cb1)), es.filter_jit(make(cb2))
    x = jnp.ones(3)
    assert np.allclose(w1(x), 2.0) and np.allclose(w2(x), 2.0)
    assert (w1.cache_info().compiles, w2.cache_info().compiles) == (1, 1)
    cb1.scale = 5.0
    assert np.allclose(w2(x), 2.0)


def _adder(c):
    return lambda v: v + c


@pytest.mark.counts_traces
def test_debug_print_in_a_rebuilt_model_prints_each_models_values(capfd):
    class Model(eqx.Module):
        w: jax.Array
        act: Any

        def __call__(self, x):
            y = self.act(self.w * x)
            jax.debug.print("y={y}", y=y)
            return y

    traces = 0

    def step(model, x):
        nonlocal traces
        traces += 1
        return model(x)

    f = es.filter_jit(step)
    x = jnp.ones(2)
    for w in (1.0, 2.0, 3.0):
        # Rebuilt from equivalent parts: a new closure each time.
        out = f(Model(jnp.asarray(w), _adder(1.0)), x)
        jax.effects_barrier()
        assert np.allclose(out, w + 1.0)
    printed = capfd.readouterr().out
    assert printed.split() == ["y=[2.", "2.]", "y=[3.", "3.]", "y=[4.", "4.]"]
    # Where `jax.debug.print` is a primitive of plain values (JAX >= 0.6) it calls no object of
    # the model: rebuilt models share one trace. Where it is a `debug_callback` (JAX 0.5), each
    # rebuilt model traces, as under Equinox.
    names = {
        e.primitive.name for e in jax.make_jaxpr(lambda v: jax.debug.print("{v}", v=v))(x).eqns
    }
    assert traces == (1 if "debug_print" in names else 3)


@pytest.mark.counts_traces
def test_rebuilt_error_checks_share_a_program_and_still_raise():
    # `equinox.error_if` runs Equinox's own callback over the trace's messages: equal messages
    # raise the same error, so closures over fresh equal dicts (two entries, equal traces) share
    # one program, and the second still raises, with its own message.
    from eqxstable._jit._fingerprint import AVAILABLE

    def make(msg):
        d = {"a": 2.0}
        return lambda x: eqx.error_if(x * d["a"], x > 1.0, msg)

    w1, w2, w3 = (es.filter_jit(make(m)) for m in ("too big", "too big", "other"))
    x = jnp.ones(2)
    for w in (w1, w2, w3):
        assert np.allclose(w(x * 0.5), 1.0)
    compiles = [w.cache_info().compiles for w in (w1, w2, w3)]
    assert compiles == ([1, 0, 1] if AVAILABLE else [1, 1, 1])
    with pytest.raises(eqx.EquinoxRuntimeError, match="too big"):
        w2(x * 2.0)
    with pytest.raises(eqx.EquinoxRuntimeError, match="other"):
        w3(x * 2.0)


def test_a_user_callback_named_like_equinoxs_is_pinned():
    from eqxstable._jit._pinned import runs_python

    def _error(msgs):
        def raises(i):
            return np.asarray(i, dtype=np.int32)

        return raises

    cb = _error(["m"])
    assert cb.__qualname__.endswith("_error.<locals>.raises")
    sds = jax.ShapeDtypeStruct((), jnp.int32)
    jaxpr = jax.make_jaxpr(lambda i: jax.pure_callback(cb, sds, i))(jnp.int32(0))
    assert runs_python(jaxpr)
    check = jax.make_jaxpr(lambda x: eqx.error_if(x, x > 1.0, "m"))(jnp.ones(2))
    assert not runs_python(check)


def test_error_checks_over_library_modules_are_not_pinned():
    # `equinox.error_if` over a value holding Equinox modules and NamedTuples of library classes
    # (optimistix's `Solution` and optax's states): its `tpu_msg` callback rebuilds the value by
    # library code alone, so rebuilt solvers may share the program. A user's class may run the
    # user's code while it is rebuilt: pinned.
    from eqxstable._jit._pinned import runs_python

    class Mine(eqx.Module):
        w: jax.Array

    class Pair(NamedTuple):
        a: jax.Array

    linear = eqx.nn.Linear(2, 2, key=jax.random.key(0))
    for value, pinned in ((linear, False), (Mine(jnp.ones(2)), True), (Pair(jnp.ones(2)), True)):
        check = jax.make_jaxpr(lambda v: eqx.error_if(v, jnp.any(jax.tree.leaves(v)[0] > 1), "m"))
        assert runs_python(check(value)) is pinned


@pytest.mark.counts_traces
def test_rebuilt_statics_share_a_program_checked_over_a_library_module():
    traces = 0

    @es.filter_jit
    def step(model, scale, x):
        nonlocal traces
        traces += 1
        out = eqx.tree_at(lambda m: m.bias, model, scale(model.bias))
        return eqx.error_if(out, jnp.any(x > 1.0), "too big")

    linear = eqx.nn.Linear(2, 2, key=jax.random.key(0))
    for factor in (2.0, 2.0):
        out = step(linear, lambda b, f=factor: b * f, jnp.zeros(2))
        assert np.allclose(out.bias, np.asarray(linear.bias) * 2.0)
    assert traces == 1
    with pytest.raises(eqx.EquinoxRuntimeError, match="too big"):
        step(linear, lambda b, f=2.0: b * f, jnp.full(2, 2.0))


@pytest.mark.counts_traces
def test_jax_random_in_a_trace_is_not_a_callback():
    # `random_wrap` and `random_seed` hold JAX's own PRNG functions (in a NamedTuple): read
    # while tracing and lowering, never called by the program.
    traces = 0

    def loss(model, x, key):
        nonlocal traces
        traces += 1
        key = jax.random.fold_in(jax.random.key(0), 1) if key is None else key
        return jnp.mean(jax.vmap(model)(x + jax.random.normal(key, x.shape)) ** 2)

    stable = es.filter_jit(loss)
    x = jnp.ones((4, 2))
    model = None
    for seed in range(3):
        model = eqx.nn.MLP(2, 1, 8, 1, activation=lambda z: z / 2, key=jax.random.key(0))
        out = stable(model, x, jax.random.PRNGKey(seed))
        assert np.allclose(out, loss(model, x, jax.random.PRNGKey(seed)), rtol=1e-5)
    assert stable(model, x, None) == pytest.approx(float(loss(model, x, None)), rel=1e-5)
    assert traces == 2 + 4  # Two traces, and the four eager checks.
