"""`es.filter_jit` as a drop-in for `equinox.filter_jit`: arguments bound to the signature, the
wrapper a pytree of the function's arrays (gradients, donation), `fun=`, copies, bad input.

Equinox's own expectations, checked here with our own cases: deleted buffers for donation,
numeric gradients, and trace counts (a `nonlocal`-style counter and JAX's compile log).
"""

import copy
import pickle
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import pytest

import eqxstable as es

from .helpers import compile_log, count_traces


def _add(x, y):
    return x + y


class Scale(eqx.Module):
    weight: jax.Array

    def __call__(self, x):
        return self.weight * x


#
# Arguments are bound to the signature.
#


@pytest.mark.parametrize(
    "call",
    [
        lambda f, x, y: f(x=x, y=y),
        lambda f, x, y: f(y=y, x=x),
        lambda f, x, y: f(x, y=y),
        lambda f, x, y: f(x, y),
    ],
    ids=["both-keyword", "reversed-keywords", "second-keyword", "positional"],
)
@pytest.mark.parametrize("donate", ["all-except-first", "warn-except-first"])
def test_all_except_first_never_donates_the_first_argument(call, donate):
    f = es.filter_jit(_add, donate=donate)
    x, y = jnp.arange(3.0), jnp.ones(3)
    out = call(f, x, y)
    assert not x.is_deleted()
    assert y.is_deleted()
    assert out.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.counts_traces
def test_keyword_and_positional_calls_share_one_program():
    counter = count_traces(_add)
    f = es.filter_jit(counter)
    with compile_log() as log:
        outs = [f(jnp.ones(2), jnp.ones(2)), f(x=jnp.ones(2), y=jnp.ones(2)), f(jnp.ones(2), y=2)]
    assert [o.tolist() for o in outs] == [[2.0, 2.0], [2.0, 2.0], [3.0, 3.0]]
    # The third call differs in a static value (2), not in how it was passed.
    assert counter.count == 2 == log.count("_add") == f.cache_info().misses
    assert f.misses[1].path == "args[1]"


def test_keyword_only_and_var_keyword_arguments_stay_keywords():
    def f(x, *, scale, **extra):
        return x * scale + sum(extra.values())

    jitted = es.filter_jit(f)
    assert float(jitted(jnp.asarray(2.0), scale=3.0, bias=jnp.asarray(1.0))) == 7.0
    assert float(jitted(x=jnp.asarray(2.0), scale=3.0, bias=jnp.asarray(1.0))) == 7.0
    assert jitted.cache_info().misses == 1


def test_arguments_that_do_not_fit_raise_as_a_call_would():
    jitted = es.filter_jit(_add)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        jitted(jnp.ones(2), x=jnp.ones(2))  # pyright: ignore[reportCallIssue]
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        jitted(jnp.ones(2), z=jnp.ones(2))  # pyright: ignore[reportCallIssue]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        jitted(jnp.ones(2), jnp.ones(2), z=jnp.ones(2))  # pyright: ignore[reportCallIssue]
    assert jitted.cache_info().misses == 0


#
# The wrapper is a pytree whose leaves are the function's arrays.
#


def test_leaves_are_the_functions_arrays(getkey):
    linear = eqx.nn.Linear(3, 2, key=getkey())
    jitted = es.filter_jit(linear)
    leaves = jtu.tree_leaves(jitted)
    assert len(leaves) == 2
    assert leaves[0] is linear.weight and leaves[1] is linear.bias
    paths = [jtu.keystr(p) for p, _ in jtu.tree_flatten_with_path(jitted)[0]]
    assert paths == [".__wrapped__.weight", ".__wrapped__.bias"]
    assert jtu.tree_leaves(es.filter_jit(_add)) == []


def test_gradients_reach_a_jitted_modules_weights(getkey):
    linear = eqx.nn.Linear(3, 2, key=getkey())
    x = jnp.array([1.0, 2.0, 3.0])

    def loss(model, x):
        return jnp.sum(model(x))

    grads = eqx.filter_grad(loss)(es.filter_jit(linear), x)
    expected = eqx.filter_grad(loss)(eqx.filter_jit(linear), x)
    assert grads.__wrapped__.weight.tolist() == [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    assert grads.__wrapped__.bias.tolist() == [1.0, 1.0]
    assert jnp.array_equal(grads.__wrapped__.weight, expected.__wrapped__.weight)


def test_a_rebuilt_copy_counts_with_the_original():
    jitted = es.filter_jit(Scale(jnp.asarray(2.0)))
    copied = jtu.tree_map(lambda w: w * 5, jitted)
    assert float(copied(jnp.asarray(1.0))) == 10.0
    assert float(jitted(jnp.asarray(1.0))) == 2.0
    info = jitted.cache_info()
    assert (info.hits, info.misses) == (1, 1)
    assert copied.cache_info() == info
    assert copied.explain() == jitted.explain()


def test_counters_are_no_part_of_the_structure_or_the_key():
    first, second = es.filter_jit(_add), es.filter_jit(_add)
    first(jnp.ones(2), jnp.ones(2))
    assert jtu.tree_structure(first) == jtu.tree_structure(second)
    assert es.stable_key(first) == es.stable_key(second)
    assert first.cache_info().misses == 1 and second.cache_info().misses == 0

    # A wrapper passed as an argument is never "mutated" by its own calls.
    def apply(g, x):
        return g(x, x)

    outer = es.filter_jit(apply)
    for _ in range(3):
        outer(first, jnp.ones(2))
        first(jnp.ones(2), jnp.ones(2))
    assert [m.kind for m in outer.misses] == ["first"]


def _vjp_with_a_counting_backward_rule(step):
    """`f(x) = x` whose backward rule adds `step` and counts its own traces (`nonlocal`)."""
    traces = 0

    @eqx.filter_custom_vjp
    def f(x):
        return x

    @f.def_fwd
    def f_fwd(perturbed, x):
        del perturbed
        return x, None

    @f.def_bwd
    def f_bwd(residual, g, perturbed, x):
        del residual, perturbed, x
        nonlocal traces
        traces += 1
        return g + step

    return f, lambda: traces


# Equinox's expectation: a backward rule is traced when the gradient is taken, after the call
# returned; the count it keeps of its own traces is no change to the function, so a new wrapper
# of the same function is the same program (and JAX's cached gradient of it).
@pytest.mark.counts_traces
def test_a_backward_rule_that_counts_its_traces():
    f, traces = _vjp_with_a_counting_backward_rule(2.0)
    x = jnp.asarray(1.0)
    assert float(eqx.filter_grad(es.filter_jit(f))(x)) == 3.0
    assert float(eqx.filter_grad(es.filter_jit(f))(x)) == 3.0
    assert traces() == 1
    # Rebuilt, it counts in another cell: a new function, traced again, with its own value.
    g, g_traces = _vjp_with_a_counting_backward_rule(5.0)
    assert float(eqx.filter_grad(es.filter_jit(g))(x)) == 6.0
    assert (traces(), g_traces()) == (1, 1)


class Step(eqx.Module):
    weight: jax.Array

    def __call__(self, x):
        # Two outputs of the inputs' shape, so that XLA can reuse both donated buffers (a
        # donated buffer that XLA cannot use is left alone).
        return self.weight * x, Step(self.weight + 1)


@pytest.mark.parametrize("donate", ["all", "all-except-first"])
def test_donation_covers_the_functions_own_arrays(donate):
    module = Step(jnp.arange(3.0))
    x = jnp.ones(3)
    out, new = es.filter_jit(module, donate=donate)(x)
    assert out.tolist() == [0.0, 1.0, 2.0]
    assert new.weight.tolist() == [1.0, 2.0, 3.0]
    assert module.weight.is_deleted()
    assert x.is_deleted() == (donate == "all")


def test_no_donation_keeps_the_functions_arrays():
    module = Scale(jnp.arange(3.0))
    jitted = es.filter_jit(module)
    jitted(jnp.ones(3))
    assert not module.weight.is_deleted()
    assert jitted(jnp.ones(3)).tolist() == [0.0, 1.0, 2.0]


#
# `fun=`, copies, pickling.
#


def test_fun_by_keyword():
    jitted = es.filter_jit(fun=_add)
    assert jitted(jnp.ones(2), 1.0).tolist() == [2.0, 2.0]
    assert es.filter_jit(fun=_add, donate="all").donate == "all"


def test_copy_and_deepcopy_of_a_wrapper():
    jitted = es.filter_jit(Scale(jnp.asarray(3.0)))
    jitted(jnp.asarray(1.0))
    shallow = copy.copy(jitted)
    deep = copy.deepcopy(jitted)
    assert float(shallow(jnp.asarray(2.0))) == 6.0
    assert float(deep(jnp.asarray(2.0))) == 6.0
    # The shallow copy is the same jitted function (two calls counted); the deep one has
    # counters of its own (one call) and finds the compiled program again.
    info, deep_info = jitted.cache_info(), deep.cache_info()
    assert (info.hits + info.misses, deep_info.hits, deep_info.misses) == (2, 1, 0)
    assert jtu.tree_leaves(deep)[0] is not jtu.tree_leaves(jitted)[0]


def test_copy_and_deepcopy_of_a_module_holding_a_wrapper():
    class Holder(eqx.Module):
        step: Callable

    holder = Holder(es.filter_jit(Scale(jnp.asarray(2.0))))
    for clone in (copy.copy(holder), copy.deepcopy(holder)):
        assert float(clone.step(jnp.asarray(4.0))) == 8.0


def test_pickle_round_trip():
    jitted = es.filter_jit(_add, donate="all-except-first", max_traces=3)
    restored = pickle.loads(pickle.dumps(jitted))
    assert (restored.donate, restored.max_traces) == ("all-except-first", 3)
    assert restored(jnp.ones(2), jnp.ones(2)).tolist() == [2.0, 2.0]


#
# Bad input is refused at once.
#


@pytest.mark.parametrize(
    ("value", "shown"), [(42, "int `42`"), ("f", "str `'f'`"), ([len], "list `[<built-in")]
)
def test_a_non_callable_is_refused_at_once(value, shown):
    expected = r"`es.filter_jit\(fun\)` should be given a callable"
    with pytest.raises(TypeError, match=expected) as info:
        es.filter_jit(value)
    assert f"not {shown}" in str(info.value)
