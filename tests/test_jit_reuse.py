"""A new `es.filter_jit` wrapper per call reuses the compiled program wherever `equinox.filter_jit`
does (and the reuse is never stale): two witnesses each, a trace counter in the function and
JAX's compile log."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import eqxstable as es

from .helpers import compile_log


class Scale(eqx.Module):
    weight: jax.Array

    def __call__(self, x):
        return self.weight * x


@pytest.mark.counts_traces
def test_a_module_with_new_weights_each_call(compiles):
    traces = 0

    class Counted(eqx.Module):
        weight: jax.Array

        def __call__(self, x):
            nonlocal traces
            traces += 1
            return self.weight * x

    outs = [float(es.filter_jit(Counted(jnp.asarray(w)))(jnp.asarray(2.0))) for w in (1, 2, 3)]
    # The weights are arguments of the program, not constants baked into it.
    assert outs == [2.0, 4.0, 6.0]
    assert traces == 1 == compiles.count("Counted")


@pytest.mark.counts_traces
def test_filter_grad_of_a_new_wrapper_each_call():
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return jnp.sum(x**2)

    grads = [eqx.filter_grad(es.filter_jit(f))(jnp.asarray(1.0))]
    # One gradient compiles several programs named `f` (forward and backward): none after it.
    with compile_log() as log:
        grads += [eqx.filter_grad(es.filter_jit(f))(jnp.asarray(v)) for v in (2.0, 3.0)]
    assert [float(g) for g in grads] == [2.0, 4.0, 6.0]
    assert traces == 1
    assert log.count("f") == 0


@pytest.mark.counts_traces
def test_jit_of_filter_grad_built_each_call(compiles):
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x**2

    grads = [float(es.filter_jit(eqx.filter_grad(f))(jnp.asarray(v))) for v in (1.0, 2.0)]
    assert grads == [2.0, 4.0]
    assert traces == 1


@pytest.mark.counts_traces
def test_a_bound_method_wrapped_each_call(compiles):
    traces = 0

    class Model(eqx.Module):
        weight: jax.Array

        def predict(self, x):
            nonlocal traces
            traces += 1
            return self.weight + x

    for w in (1.0, 2.0, 3.0):
        model = Model(jnp.asarray(w))
        assert float(es.filter_jit(model.predict)(jnp.asarray(1.0))) == w + 1
        assert float(es.filter_jit(model.predict)(jnp.asarray(1.0))) == w + 1
    assert traces == 1 == compiles.count("predict")


@pytest.mark.counts_traces
def test_a_self_counting_function_wrapped_twice(compiles):
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x + 1

    assert float(es.filter_jit(f)(jnp.asarray(1.0))) == 2.0
    second = es.filter_jit(f)
    assert float(second(jnp.asarray(2.0))) == 3.0
    assert traces == 1 == compiles.count("f")
    assert (second.cache_info().hits, second.cache_info().misses) == (1, 0)


def test_an_equivalent_copy_in_the_counted_state_still_traces():
    # What a function changes in itself while traced is part of *its* program; a different
    # function that merely looks like it after the change never ran that trace.
    def make(start):
        n = start

        def f(x):
            nonlocal n
            n += 1
            return x * n

        return f

    assert float(es.filter_jit(make(0))(jnp.asarray(1.0))) == 1.0
    # `make(1)` is, by its key, the first function after its trace (n == 1); traced, it
    # computes x * 2.
    assert float(es.filter_jit(make(1))(jnp.asarray(1.0))) == 2.0


def test_a_new_wrapper_after_a_global_is_reassigned_is_not_stale(compiles):
    namespace: dict = {"factor": 2.0}
    exec("def scaled(x):\n    return x * factor\n", namespace)
    scaled = namespace["scaled"]
    assert es.filter_jit(scaled)(jnp.ones(2)).tolist() == [2.0, 2.0]
    namespace["factor"] = 5.0
    assert es.filter_jit(scaled)(jnp.ones(2)).tolist() == [5.0, 5.0]
    assert es.filter_jit(scaled)(jnp.ones(2)).tolist() == [5.0, 5.0]
    assert compiles.count("scaled") == 2


class Net(eqx.Module):
    scale: Scale
    activation: Callable

    def __call__(self, x):
        return self.activation(self.scale(x))


def test_a_rebuilt_module_holding_a_rebuilt_lambda_shares_the_program(compiles):
    for w in (1.0, 2.0):
        model = Net(Scale(jnp.asarray(w)), lambda v: v + 1)
        assert float(es.filter_jit(model)(jnp.asarray(3.0))) == 3 * w + 1
    assert compiles.count("Net") == 1


def test_a_new_shape_of_the_functions_own_array_is_explained():
    es.filter_jit(Scale(jnp.ones(3)))(jnp.asarray(2.0))
    wider = es.filter_jit(Scale(jnp.ones(4)))
    assert wider(jnp.asarray(2.0)).tolist() == [2.0] * 4
    miss = wider.misses[-1]
    assert (miss.kind, miss.path) == ("shape", "fun.weight")
    assert "float32[3] -> float32[4]" in miss.reason


def test_a_shared_program_keeps_no_weights_alive():
    import gc
    import weakref

    weight = jnp.arange(5.0)
    ref = weakref.ref(weight)
    jitted = es.filter_jit(Scale(weight))
    assert jitted(jnp.asarray(1.0)).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    del weight, jitted
    gc.collect()
    assert ref() is None


def test_a_wrapped_module_changed_by_force_runs_as_it_is_now():
    # `object.__setattr__` on a frozen module after wrapping it: the wrapper must not keep
    # calling the arrays and static fields it took when it was made.
    class Scale(eqx.Module):
        w: jax.Array
        k: float = eqx.field(static=True)

        def __call__(self, x):
            return x * self.w * self.k

    m = Scale(jnp.ones(2), 2.0)
    f = es.filter_jit(m)
    x = jnp.ones(2)
    assert f(x).tolist() == [2.0, 2.0]
    object.__setattr__(m, "w", jnp.full(2, 5.0))
    assert f(x).tolist() == [10.0, 10.0]
    object.__setattr__(m, "k", 3.0)
    assert f(x).tolist() == [15.0, 15.0]
    # A pytree copy holds arrays of its own, which no longer fit the changed module: refused.
    copy = jax.tree_util.tree_map(lambda a: a, es.filter_jit(m))
    object.__setattr__(m, "w", jnp.full(2, 7.0))
    with pytest.raises(TypeError, match="changed in place"):
        copy(x)


# Issue 18, family 4: the key a function (or a static argument) has after its trace changed
# it is an alias of the program for the very objects that were traced, not for every object
# with that key: a closure rebuilt over the same list that the trace appends to never ran it.


def test_a_rebuilt_function_over_state_its_trace_changed_traces_again():
    shared: list = []

    def make():
        def f(x):
            shared.append(1)
            return x * len(shared)

        return f

    outs = [float(es.filter_jit(make())(jnp.asarray(1.0))) for _ in range(3)]
    # As eager Python and `equinox.filter_jit` (which traces each new function).
    assert outs == [1.0, 2.0, 3.0]


def test_a_rebuilt_static_argument_over_state_its_trace_changed_traces_again():
    shared: list = []

    def make():
        def h(x):
            shared.append(1)
            return x * len(shared)

        return h

    jitted = es.filter_jit(lambda x, fn: fn(x))
    outs = [float(jitted(jnp.asarray(1.0), make())) for _ in range(3)]
    assert outs == [1.0, 2.0, 3.0]
    assert jitted.cache_info().misses == 3


@pytest.mark.counts_traces
def test_the_traced_objects_still_find_their_alias(compiles):
    # What the trace changed is part of the program for the objects that ran it: the same
    # function wrapped again, and the same static passed again, hit.
    shared: list = []

    def f(x):
        shared.append(1)
        return x * 2

    def call(x, fn):
        return fn(x)

    assert float(es.filter_jit(f)(jnp.asarray(1.0))) == 2.0
    again = es.filter_jit(f)
    assert float(again(jnp.asarray(2.0))) == 4.0
    assert again.cache_info()[:2] == (1, 0)
    jitted = es.filter_jit(call)
    assert float(jitted(jnp.asarray(1.0), f)) == 2.0
    assert float(jitted(jnp.asarray(3.0), f)) == 6.0
    assert jitted.cache_info()[:2] == (1, 1)
