"""`StableModule`: rebuilt from equivalent parts, it hits the cache of *plain* `eqx.filter_jit`.

Every "no recompile" claim has two witnesses: a `nonlocal` counter in the body of the function
given to plain `equinox.filter_jit`, and JAX's compile log. Every output is checked numerically.
"""

import dataclasses
import functools as ft
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import eqxstable as es
from eqxstable._module._static import Static

from .helpers import compile_log, counting_filter_jit


#
# The modules of issue 3, each built afresh (new lambdas, partials, jitted functions) every time.
#


class LambdaField(es.StableModule):
    fn: Callable

    def __init__(self):
        self.fn = lambda x: 3.0 * x + 1.0

    def __call__(self, x):
        return self.fn(x)


class JitInInit(es.StableModule):
    fn: Callable

    def __init__(self):
        self.fn = jax.jit(jnp.sin)

    def __call__(self, x):
        return self.fn(x)


class PartialField(es.StableModule):
    fn: Callable

    def __init__(self):
        self.fn = ft.partial(jnp.multiply, 2.5)

    def __call__(self, x):
        return self.fn(x)


@dataclasses.dataclass(frozen=True)
class Scaler:
    factor: float

    def apply(self, x):
        return self.factor * x


class BoundMethodField(es.StableModule):
    fn: Callable

    def __init__(self):
        self.fn = Scaler(4.0).apply

    def __call__(self, x):
        return self.fn(x)


class LambdaMLP(es.StableModule):
    mlp: eqx.nn.MLP

    def __init__(self):
        self.mlp = eqx.nn.MLP(3, 3, 8, 2, activation=lambda x: jnp.maximum(x, 0.1 * x), key=_KEY)

    def __call__(self, x):
        return self.mlp(x)


class Optimizer(es.StableModule):
    opt: optax.GradientTransformation

    def __init__(self):
        self.opt = optax.adam(1e-3)

    def __call__(self, x):
        # Two Adam steps on `0.5 * |x|^2`, whose gradient is `x` itself.
        state = self.opt.init(x)
        for _ in range(2):
            updates, state = self.opt.update(x, state, x)
            x = optax.apply_updates(x, updates)
        return x


class StaticContainers(es.StableModule):
    config: dict = eqx.field(static=True)
    sizes: list = eqx.field(static=True)
    table: np.ndarray = eqx.field(static=True)

    def __init__(self):
        self.config = {"scale": 2.0, "shift": [1.0, 2.0]}
        self.sizes = [1, 2, 3]
        self.table = np.array([10.0, 20.0, 30.0], dtype=np.float32)

    def __call__(self, x):
        shift = sum(self.config["shift"])
        return self.config["scale"] * x + shift + sum(self.sizes) + jnp.asarray(self.table)


_KEY = jr.key(0)
_X = jnp.array([0.5, -1.0, 2.0], dtype=jnp.float32)


def _mlp_reference(activation):
    mlp = eqx.nn.MLP(3, 3, 8, 2, activation=activation, key=_KEY)
    return lambda x: mlp(x)


def _adam_reference(x):
    opt = optax.adam(1e-3)
    state = opt.init(x)
    for _ in range(2):
        updates, state = opt.update(x, state, x)
        x = optax.apply_updates(x, updates)
    return x


CASES = {
    "lambda": (LambdaField, lambda x: 3.0 * x + 1.0),
    "jit_in_init": (JitInInit, jnp.sin),
    "partial": (PartialField, lambda x: 2.5 * x),
    "bound_method_of_frozen_dataclass": (BoundMethodField, lambda x: 4.0 * x),
    "mlp_lambda_activation": (LambdaMLP, _mlp_reference(lambda x: jnp.maximum(x, 0.1 * x))),
    "optax_adam": (Optimizer, _adam_reference),
    "static_dict_list_numpy": (
        StaticContainers,
        lambda x: 2.0 * x + 3.0 + 6 + jnp.array([10.0, 20.0, 30.0]),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rebuilt_five_times_traces_once(name):
    make, reference = CASES[name]
    run, traces = counting_filter_jit(lambda model, x: model(x))
    with compile_log() as log:
        for i in range(5):
            x = _X + i  # New values, same shape: only a changed static part could retrace.
            out = run(make(), x)
            np.testing.assert_allclose(out, reference(x), rtol=1e-6, atol=1e-6)
    # A `functools.partial` leaf is never substituted (it can change in place, attack round
    # 10a, finding 01), and plain Equinox compares it by identity: each rebuild retraces there
    # (`es.filter_jit` shares it: `test_registry_partials_change.py`).
    expected = 5 if name == "partial" else 1
    assert traces() == expected
    assert log.count("run") == expected


@pytest.mark.parametrize("name", [name for name in CASES if name != "static_dict_list_numpy"])
def test_plain_module_would_retrace(name):
    # The control: the same fields in a plain `eqx.Module` retrace on every rebuild (or, for
    # the static containers, cannot even be hashed). Otherwise the test above proves nothing.
    make, _ = CASES[name]
    plain = type(f"Plain{make.__name__}", (eqx.Module,), {**_plain_namespace(make)})
    run, traces = counting_filter_jit(lambda model, x: model(x))
    for _ in range(3):
        run(plain(), _X)
    assert traces() == 3


def _plain_namespace(cls: type) -> dict:
    # Equinox < 0.13 makes modules frozen dataclasses, which own `__setattr__`/`__delattr__`.
    skip = {"__dict__", "__weakref__", "__dataclass_fields__", "__dataclass_params__"}
    skip |= {"__setattr__", "__delattr__"}
    namespace = {k: v for k, v in vars(cls).items() if k not in skip and not k.startswith("_abc")}
    namespace["__annotations__"] = dict(cls.__annotations__)
    return namespace


def test_plain_module_fails_on_a_rebuilt_static_numpy_array():
    # The control for the static containers: plain Equinox warns, then JAX cannot compare two
    # rebuilt arrays (`==` is elementwise) and the second call fails.
    class Plain(eqx.Module):
        table: np.ndarray = eqx.field(static=True)

        def __call__(self, x):
            return x * self.table

    run, _ = counting_filter_jit(lambda model, x: model(x))
    with pytest.warns(UserWarning, match="JAX array is being set as static"):
        first, second = Plain(np.ones(3)), Plain(np.ones(3))
    run(first, _X)
    with pytest.raises(ValueError, match="static arguments should be comparable"):
        run(second, _X)


def test_static_containers_read_back_as_assigned_and_are_canonical_underneath():
    m = StaticContainers()
    # The module's code sees what was assigned, read-only.
    assert isinstance(m.config, dict) and m.config == {"scale": 2.0, "shift": [1.0, 2.0]}
    assert isinstance(m.sizes, list) and m.sizes == [1, 2, 3]
    assert type(m.table) is np.ndarray and m.table.dtype == np.float32
    assert not m.table.flags.writeable
    np.testing.assert_array_equal(m.table == 20.0, [False, True, False])  # Elementwise.
    # JAX and Equinox see one hashable canonical object per value, the same on a rebuild.
    again = StaticContainers()
    for name in ("config", "sizes", "table"):
        assert type(m.__dict__[name]) is Static
        assert again.__dict__[name] is m.__dict__[name]
    hash(jax.tree_util.tree_structure(m))
    assert jax.tree_util.tree_structure(again) == jax.tree_util.tree_structure(m)


def test_closure_with_a_different_constant_recompiles_with_the_new_answer():
    class Scale(es.StableModule):
        fn: Callable

        def __init__(self, factor):
            self.fn = lambda x: factor * x

        def __call__(self, x):
            return self.fn(x)

    run, traces = counting_filter_jit(lambda model, x: model(x))
    x = jnp.arange(3, dtype=jnp.int32)
    for _ in range(3):
        np.testing.assert_array_equal(run(Scale(2), x), [0, 2, 4])
    assert traces() == 1
    np.testing.assert_array_equal(run(Scale(3), x), [0, 3, 6])
    assert traces() == 2
    # Type-exact: `2.0` is not `2`, and the answer is a float array, not a stale int one.
    out = run(Scale(2.0), x)
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])
    assert traces() == 3
    np.testing.assert_array_equal(run(Scale(2), x), [0, 2, 4])
    assert traces() == 3


def test_clear_caches_then_rebuild():
    # After `es.clear_caches()` the registry starts afresh: rebuilt modules agree again.
    first = LambdaMLP()
    es.clear_caches()
    a, b = LambdaMLP(), LambdaMLP()
    assert a.mlp.activation is b.mlp.activation
    assert es.stabilize(first).mlp.activation is a.mlp.activation


def test_optimizer_with_another_learning_rate_recompiles():
    class Opt(es.StableModule):
        opt: optax.GradientTransformation

        def __call__(self, x):
            updates, _ = self.opt.update(x, self.opt.init(x), x)
            return updates

    run, traces = counting_filter_jit(lambda model, x: model(x))
    np.testing.assert_allclose(run(Opt(optax.sgd(0.1)), _X), -0.1 * _X, rtol=1e-6)
    np.testing.assert_allclose(run(Opt(optax.sgd(0.1)), _X), -0.1 * _X, rtol=1e-6)
    assert traces() == 1
    np.testing.assert_allclose(run(Opt(optax.sgd(0.2)), _X), -0.2 * _X, rtol=1e-6)
    assert traces() == 2
    # Adam's first step is `-lr * sign(grad)` (up to its epsilon).
    np.testing.assert_allclose(run(Opt(optax.adam(1e-3)), _X), -1e-3 * jnp.sign(_X), rtol=1e-4)
    np.testing.assert_allclose(run(Opt(optax.adam(1e-4)), _X), -1e-4 * jnp.sign(_X), rtol=1e-4)
    np.testing.assert_allclose(run(Opt(optax.adam(1e-3)), _X), -1e-3 * jnp.sign(_X), rtol=1e-4)
    assert traces() == 4


def test_static_dict_is_type_exact():
    # `{"scale": 2} == {"scale": 2.0}` in Python, and plain Equinox would reuse the int program.
    class Static(es.StableModule):
        config: dict = eqx.field(static=True)

        def __call__(self, x):
            return self.config["scale"] * x

    run, traces = counting_filter_jit(lambda model, x: model(x))
    x = jnp.arange(3, dtype=jnp.int32)
    assert run(Static({"scale": 2}), x).dtype == jnp.int32
    out = run(Static({"scale": 2.0}), x)
    assert out.dtype == jnp.float32
    assert traces() == 2
