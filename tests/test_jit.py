"""The stable `filter_jit` as a drop-in for `equinox.filter_jit`, and its two fixes: equivalent
rebuilt statics hit, and keys are type-exact."""

import math
import warnings
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqxstable as es

from .helpers import compile_log, count_traces


@pytest.fixture(autouse=True)
def _fresh_caches():
    # Wrappers of equivalent functions share compiled programs (as `eqx.filter_jit` does), so a
    # parametrized test would otherwise start warm.
    es.clear_caches()


@pytest.mark.counts_traces
def test_num_traces_agrees_with_counter_and_compile_log():
    def f(x, y):
        return x + y

    counter = count_traces(f)
    jitted = es.filter_jit(counter)
    with compile_log() as log:
        jitted(jnp.ones(3), 1)
        jitted(jnp.zeros(3), 1)
        jitted(jnp.ones(3), 2)
        jitted(jnp.ones(4), 2)
        jitted(jnp.ones(4), 2)
    assert counter.count == 3
    assert log.count("f") == 3
    info = jitted.cache_info()
    assert (info.hits, info.misses, info.maxsize, info.currsize) == (2, 3, 4096, 3)


@pytest.mark.counts_traces
def test_nonlocal_counter_agrees_with_cache_info():
    traces = 0

    @es.filter_jit
    def f(x, activation):
        nonlocal traces
        traces += 1
        return activation(x)

    with compile_log() as log:
        for i in range(4):
            f(jnp.ones(2) * i, lambda v: v + 1)  # a new but equivalent lambda every call
        f(jnp.ones(2), lambda v: v + 2)
    assert traces == 2 == log.count("f") == f.cache_info().misses
    assert f.cache_info().hits == 3


def test_outputs_match_eqx_filter_jit(getkey):
    mlp = eqx.nn.MLP(3, 2, 8, 2, key=getkey())
    x = jax.random.normal(getkey(), (5, 3))

    def f(model, x, scale, *, shift):
        return jax.vmap(model)(x) * scale + shift, "label", None, (1, 2.0)

    ours = es.filter_jit(f)(mlp, x, 2.0, shift=jnp.ones(2))
    theirs = eqx.filter_jit(f)(mlp, x, 2.0, shift=jnp.ones(2))
    assert ours[1:] == theirs[1:] == ("label", None, (1, 2.0))
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)


def test_decorator_with_and_without_arguments():
    @es.filter_jit
    def f(x):
        """Docs of f."""
        return x * 2

    @es.filter_jit(donate="none", max_traces=3)
    def g(x):
        return x * 3

    assert f.__name__ == "f" and f.__doc__ == "Docs of f." and callable(f.__wrapped__)
    assert int(f(jnp.array(2))) == 4
    assert int(g(jnp.array(2))) == 6


def test_method_on_module(getkey):
    class Model(eqx.Module):
        linear: eqx.nn.Linear

        @es.filter_jit
        def __call__(self, x):
            return self.linear(x)

    model = Model(eqx.nn.Linear(3, 2, key=getkey()))
    out = model(jnp.ones(3))
    assert out.shape == (2,)
    model2 = eqx.tree_at(lambda m: m.linear.weight, model, model.linear.weight * 2)
    model2(jnp.ones(3))
    wrapper: Any = Model.__call__
    assert wrapper.cache_info()[:2] == (1, 1)


@pytest.mark.counts_traces
def test_numpy_arrays_are_traced():
    def f(x):
        return x + 1

    counter = count_traces(f)
    jitted = es.filter_jit(counter)
    out = jitted(np.ones(3, np.float32))
    jitted(np.zeros(3, np.float32))
    jitted(jnp.ones(3))  # a JAX array of the same shape and dtype: the same program
    assert counter.count == 1
    assert isinstance(out, jax.Array)


def test_compile_log_shows_the_function_name():
    def my_named_function(x):
        return x * 2

    with compile_log() as log:
        es.filter_jit(my_named_function)(jnp.ones(2))
    assert log.count("my_named_function") == 1


@pytest.mark.parametrize("donate", ["all", "all-except-first", "warn-except-first", "none"])
def test_donate_modes(donate):
    def f(a, b):
        return a + 1, b * 2

    jitted = es.filter_jit(f, donate=donate)
    a, b = jnp.ones(3), jnp.ones(3)
    out_a, out_b = jitted(a, b)
    np.testing.assert_allclose(out_a, 2.0)
    np.testing.assert_allclose(out_b, 2.0)
    assert a.is_deleted() == (donate == "all")
    assert b.is_deleted() == (donate != "none")


def test_donate_warn_keeps_jax_warning():
    jitted = es.filter_jit(lambda a: a.sum(), donate="warn")
    with pytest.warns(UserWarning, match="Some donated buffers were not usable"):
        jitted(jnp.ones(3))


def _sums(a, b):
    return (a * 2).sum()


def _sums_too(a, b):
    return (a * 2).sum()


def _donation_warnings(call: Callable[[], Any]) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return sum("Some donated buffers were not usable" in str(w.message) for w in caught)


@pytest.mark.parametrize("first", ["all", "warn"])
@pytest.mark.parametrize("second", ["warn", "warn-except-first"])
def test_donate_warn_warns_where_a_program_of_an_equal_trace_was_compiled(first, second):
    # Attack 15-03: a function whose trace matches a compiled program runs it without
    # compiling, and JAX warns while compiling: a warning mode compiles its own, and warns
    # as `equinox.filter_jit` does for the same fresh function.
    jax.clear_caches()  # JAX compiles an equal computation once, and warns once.
    want = _donation_warnings(
        lambda: eqx.filter_jit(_sums_too, donate=second)(jnp.ones(3), jnp.ones(4))
    )
    jax.clear_caches()
    es.clear_caches()
    _donation_warnings(lambda: es.filter_jit(_sums, donate=first)(jnp.ones(3), jnp.ones(4)))
    later = es.filter_jit(_sums_too, donate=second)
    shown = _donation_warnings(lambda: later(jnp.ones(3), jnp.ones(4)))
    assert shown == want == (1 if second == "warn" else 0)


def test_lower_and_compile():
    def f(x, n):
        return x * n

    jitted = es.filter_jit(f)
    lowered = jitted.lower(jnp.ones(3), 2)
    text = lowered.as_text()
    # The program of `f` for `x: f32[3]`, with the static `n = 2` folded in as a constant.
    assert "module @jit_f" in text
    assert "tensor<3xf32>" in text
    assert "stablehlo.multiply" in text
    assert "stablehlo.constant dense<2.000000e+00>" in text
    compiled = lowered.compile()
    np.testing.assert_allclose(compiled(jnp.ones(3), 2), 2.0)
    with pytest.raises(TypeError, match=r"differ from those it was lowered with"):
        compiled(jnp.ones(3), 3)


@pytest.mark.counts_traces
def test_a_call_after_lower_is_one_miss_without_a_second_trace():
    counter = count_traces(lambda x: x * 2)
    jitted = es.filter_jit(counter)
    jitted.lower(jnp.ones(3))
    jitted(jnp.ones(3))
    jitted(jnp.ones(3))
    assert counter.count == 1  # JAX reuses the trace of `.lower()`, and compiles at the call
    # The `.lower()` is the miss (it traced), and counts as a call; the calls are hits, the
    # first of which compiled that trace (attack 9b-08: the trace went uncounted).
    info = jitted.cache_info()
    assert (info.hits, info.misses, info.traces, info.compiles) == (2, 1, 1, 1)
    assert [m.kind for m in jitted.misses] == ["first"] and not jitted.misses[0].compiled


def test_error_if_surfaces():
    jitted = es.filter_jit(lambda x: eqx.error_if(x, x > 0, "x must not be positive"))
    with pytest.raises(Exception, match="x must not be positive"):
        jax.block_until_ready(jitted(jnp.ones(3)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"donate": "some"}, r"`es.filter_jit\(..., donate='some'\)` is not a donation mode"),
        ({"on_recompile": "shout"}, r"on_recompile='shout'\)` is not an option"),
        ({"max_traces": 0}, r"max_traces=0\)` should be a positive int"),
        ({"static_argnums": 1}, r"`es.filter_jit\(..., static_argnums=...\)` is not supported"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        es.filter_jit(lambda x: x, **kwargs)


def test_inside_another_transform():
    jitted = es.filter_jit(lambda x, p: jnp.sum(x**p))
    grad = jax.grad(jitted)(jnp.arange(3.0), 2)
    np.testing.assert_allclose(grad, [0.0, 2.0, 4.0])
    out = jax.vmap(jitted, in_axes=(0, None))(jnp.ones((4, 3)), 2)
    assert out.shape == (4,)


#
# Type-exact keys.
#


def test_int_then_float_static_returns_float():
    def g(x, s):
        return x * s

    jitted = es.filter_jit(g)
    x = jnp.arange(3)
    assert jitted(x, 1).dtype == jnp.int32
    out = jitted(x, 1.0)
    assert jnp.issubdtype(out.dtype, jnp.floating)
    np.testing.assert_allclose(out, [0.0, 1.0, 2.0])
    assert jitted.cache_info().misses == 2
    # The bug this fixes: Equinox lets `1` and `1.0` share a program and returns int32.
    baseline = eqx.filter_jit(g)
    baseline(x, 1)
    assert baseline(x, 1.0).dtype == jnp.int32


class _Scaled(eqx.Module):
    scale: Any = eqx.field(static=True)
    inner: Any


def _type_of_scale(m, x):
    return x * m.inner.scale, type(m.inner.scale).__name__


@pytest.mark.parametrize("first", [1, 1.0, True])
@pytest.mark.counts_traces
def test_nested_static_fields_are_type_exact(first):
    counter = count_traces(_type_of_scale)
    jitted = es.filter_jit(counter)
    x = jnp.arange(3)
    seen = set()
    for value in [first, 1, 1.0, True, 1, 1.0, True]:
        model = _Scaled(None, _Scaled(value, None))
        out, name = jitted(model, x)
        assert name == type(value).__name__
        assert jnp.issubdtype(out.dtype, jnp.floating) == (type(value) is float)
        seen.add(name)
    assert counter.count == 3 == len(seen)


class _Holder(eqx.Module):
    inner: Any = eqx.field(static=True)
    none: Any = None


@pytest.mark.counts_traces
def test_module_in_a_static_field_is_type_exact():
    # The inner module's own static field is node data of node data: flattening it with
    # `jax.tree_util` would lose it, and `1` and `1.0` would share a program.
    counter = count_traces(lambda m, x: x * m.inner.scale)
    jitted = es.filter_jit(counter)
    x = jnp.ones(2, jnp.int32)
    assert jitted(_Holder(_Scaled(1, None)), x).dtype == jnp.int32
    assert jnp.issubdtype(jitted(_Holder(_Scaled(1.0, None)), x).dtype, jnp.floating)
    assert jitted(_Holder(_Scaled(1, None)), x).dtype == jnp.int32
    assert counter.count == 2 == jitted.cache_info().misses


def _sign(x, s):
    return x * math.copysign(1.0, s.scale if isinstance(s, _Scaled) else s)


@pytest.mark.parametrize("wrap", [lambda s: s, lambda s: _Scaled(s, None)])
def test_negative_zero_is_not_zero(wrap: Callable):
    jitted = es.filter_jit(_sign)
    x = jnp.ones(2)
    np.testing.assert_allclose(jitted(x, wrap(0.0)), 1.0)
    np.testing.assert_allclose(jitted(x, wrap(-0.0)), -1.0)
    np.testing.assert_allclose(jitted(x, wrap(0.0)), 1.0)
    assert jitted.cache_info()[:2] == (1, 2)


#
# Equivalent rebuilt statics hit.
#


class _WithActivation(eqx.Module):
    weight: jax.Array
    activation: Callable


@pytest.mark.counts_traces
def test_plain_module_with_rebuilt_lambda_hits():
    def apply(model, x):
        return model.activation(model.weight * x)

    counter = count_traces(apply)
    jitted = es.filter_jit(counter)
    with compile_log() as log:
        for i in range(6):
            model = _WithActivation(jnp.ones(3) * i, lambda v: jnp.maximum(v, 0.5))
            jitted(model, jnp.ones(3))
    info = jitted.cache_info()
    assert (info.hits, info.misses) == (5, 1)
    assert counter.count == 1
    assert log.count("apply") == 1


def test_plain_module_with_rebuilt_lambda_misses_under_equinox():
    # The baseline that the test above improves on.
    def apply(model, x):
        return model.activation(model.weight * x)

    counter = count_traces(apply)
    jitted = eqx.filter_jit(counter)
    for i in range(3):
        jitted(_WithActivation(jnp.ones(3) * i, lambda v: v), jnp.ones(3))
    assert counter.count == 3


@pytest.mark.counts_traces
def test_rebuilt_optax_optimizer_hits():
    def step(optimizer, params, grads, state):
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    counter = count_traces(step)
    jitted = es.filter_jit(counter)
    params = {"w": jnp.ones(3)}
    state = optax.adam(1e-3).init(params)
    for _ in range(4):
        params, state = jitted(optax.adam(1e-3), params, {"w": jnp.ones(3)}, state)
    assert counter.count == 1
    assert jitted.cache_info()[:2] == (3, 1)
    jitted(optax.adam(1e-4), params, {"w": jnp.ones(3)}, state)
    assert counter.count == 2
    assert jitted.misses[-1].kind == "static"
    assert jitted.misses[-1].path == "args[0].update"


def test_inline_wrappers_share_the_program():
    def f(x):
        return x + 1

    with compile_log() as log:
        for _ in range(3):
            es.filter_jit(f)(jnp.ones(2))
    assert log.count("f") == 1


def test_callable_module_keeps_its_arrays_traced(getkey):
    linear = eqx.nn.Linear(3, 2, key=getkey())
    jitted = es.filter_jit(linear)
    assert jitted.__name__ == "Linear"
    np.testing.assert_allclose(jitted(jnp.ones(3)), linear(jnp.ones(3)), rtol=1e-6)
    other = eqx.nn.Linear(3, 2, key=getkey())
    np.testing.assert_allclose(es.filter_jit(other)(jnp.ones(3)), other(jnp.ones(3)), rtol=1e-6)


_INNER = es.filter_jit(lambda x: x + 1)


def _calls_inner(x):
    return _INNER(x)


@pytest.mark.counts_traces
def test_a_static_that_calls_a_stable_wrapper_does_not_look_mutated():
    # The wrapper's counters change on every call; they must not make a static function that
    # reads it (as a global) look changed in place.
    counter = count_traces(lambda x, f: f(x))
    outer = es.filter_jit(counter)
    outer(jnp.ones(2), _calls_inner)
    _INNER(jnp.ones(3))
    outer(jnp.ones(2), _calls_inner)
    assert counter.count == 1
    assert [m.kind for m in outer.misses] == ["first"]


@pytest.mark.counts_traces
def test_stable_wrappers_are_keyed_by_function_and_options():
    def make(max_traces=None):
        return es.filter_jit(lambda v: v * 2, max_traces=max_traces)

    assert es.stable_key(make()) == es.stable_key(make())
    assert es.stable_key(make()) != es.stable_key(make(max_traces=3))
    counter = count_traces(lambda x, f: f(x))
    outer = es.filter_jit(counter)
    for _ in range(3):
        outer(jnp.ones(2), make())
    assert counter.count == 1


@pytest.mark.counts_traces
def test_lower_traces_count_and_are_guarded():
    # Attack 9b-08: `.lower()` traced and `.compile()` compiled with nothing counted, so a second
    # trace passed `max_traces=1` (which `equinox.debug.assert_max_traces` refuses).
    traces = 0

    def f(x, k):
        nonlocal traces
        traces += 1
        return x * k

    jitted = es.filter_jit(f, max_traces=1)
    compiled = jitted.lower(jnp.ones(3), 2).compile()
    info = jitted.cache_info()
    assert traces == 1 and (info.misses, info.traces, info.compiles) == (1, 1, 1)
    assert info.compile_seconds > 0 and info.trace_seconds > 0
    np.testing.assert_allclose(compiled(jnp.ones(3), 2), 2.0)
    # Lowered again for the same arguments: JAX's trace cache, no trace, no miss.
    jitted.lower(jnp.ones(3), 2)
    assert traces == 1 and jitted.cache_info().traces == 1
    with pytest.raises(es.RecompileError, match="2nd time"):
        jitted(jnp.ones(3), 3)
    with pytest.raises(es.RecompileError, match="2nd time"):
        jitted.lower(jnp.ones(3), 4)
    assert traces == 1 and jitted.cache_info().traces == 1
