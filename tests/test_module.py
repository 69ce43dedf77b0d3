"""`StableModule`: rebuilt from equivalent parts, it hits the cache of *plain* `eqx.filter_jit`.

Every "no recompile" claim has two witnesses: a `nonlocal` counter in the body of the function
given to plain `equinox.filter_jit`, and JAX's compile log. Every output is checked numerically.
"""

import abc
import dataclasses
import functools as ft
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import eqxstable as es
from eqxstable._canonical import FrozenDict, ReadOnlyArray

from .helpers import compile_log


def _counting_jit(call: Callable[[Any, jax.Array], Any]):
    """Plain `eqx.filter_jit` of `call(model, x)`, and a function returning its trace count."""
    traces = 0

    @eqx.filter_jit
    def run(model, x):
        nonlocal traces
        traces += 1
        return call(model, x)

    return run, lambda: traces


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


class PartialMLP(es.StableModule):
    mlp: eqx.nn.MLP

    def __init__(self):
        self.mlp = eqx.nn.MLP(
            3, 3, 8, 2, activation=ft.partial(jax.nn.leaky_relu, negative_slope=0.2), key=_KEY
        )

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
    "mlp_partial_activation": (
        PartialMLP,
        _mlp_reference(ft.partial(jax.nn.leaky_relu, negative_slope=0.2)),
    ),
    "optax_adam": (Optimizer, _adam_reference),
    "static_dict_list_numpy": (
        StaticContainers,
        lambda x: 2.0 * x + 3.0 + 6 + jnp.array([10.0, 20.0, 30.0]),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rebuilt_five_times_traces_once(name):
    make, reference = CASES[name]
    run, traces = _counting_jit(lambda model, x: model(x))
    with compile_log() as log:
        for i in range(5):
            x = _X + i  # New values, same shape: only a changed static part could retrace.
            out = run(make(), x)
            np.testing.assert_allclose(out, reference(x), rtol=1e-6, atol=1e-6)
    assert traces() == 1
    assert log.count("run") == 1


@pytest.mark.parametrize("name", [name for name in CASES if name != "static_dict_list_numpy"])
def test_plain_module_would_retrace(name):
    # The control: the same fields in a plain `eqx.Module` retrace on every rebuild (or, for
    # the static containers, cannot even be hashed). Otherwise the test above proves nothing.
    make, _ = CASES[name]
    plain = type(f"Plain{make.__name__}", (eqx.Module,), {**_plain_namespace(make)})
    run, traces = _counting_jit(lambda model, x: model(x))
    for _ in range(3):
        run(plain(), _X)
    assert traces() == 3


def _plain_namespace(cls: type) -> dict:
    skip = {"__dict__", "__weakref__", "__dataclass_fields__", "__dataclass_params__"}
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

    run, _ = _counting_jit(lambda model, x: model(x))
    with pytest.warns(UserWarning, match="JAX array is being set as static"):
        first, second = Plain(np.ones(3)), Plain(np.ones(3))
    run(first, _X)
    with pytest.raises(ValueError, match="static arguments should be comparable"):
        run(second, _X)


def test_static_containers_become_hashable_canonical_forms():
    m = StaticContainers()
    assert type(m.config) is FrozenDict
    assert type(m.table) is ReadOnlyArray
    assert m.config["shift"] == (1.0, 2.0)
    assert dict(m.config).keys() == {"scale", "shift"}
    assert m.sizes == (1, 2, 3)
    assert m.table.dtype == np.float32
    assert not m.table.array.flags.writeable
    np.testing.assert_array_equal(np.asarray(m.table), [10.0, 20.0, 30.0])
    hash(jax.tree_util.tree_structure(m))
    # Rebuilt: the very same canonical objects.
    again = StaticContainers()
    assert again.table is m.table
    assert again.config == m.config


def test_closure_with_a_different_constant_recompiles_with_the_new_answer():
    class Scale(es.StableModule):
        fn: Callable

        def __init__(self, factor):
            self.fn = lambda x: factor * x

        def __call__(self, x):
            return self.fn(x)

    run, traces = _counting_jit(lambda model, x: model(x))
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

    run, traces = _counting_jit(lambda model, x: model(x))
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

    run, traces = _counting_jit(lambda model, x: model(x))
    x = jnp.arange(3, dtype=jnp.int32)
    assert run(Static({"scale": 2}), x).dtype == jnp.int32
    out = run(Static({"scale": 2.0}), x)
    assert out.dtype == jnp.float32
    assert traces() == 2


def test_no_warnings_at_construction():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for make, _ in CASES.values():
            make()
    assert [str(w.message) for w in caught] == []


def test_nested_modules_passed_in_are_not_changed():
    class Wrap(es.StableModule):
        mlp: eqx.nn.MLP

    def act(x):
        return x * 0.5

    first = eqx.nn.MLP(2, 2, 4, 1, activation=act, key=_KEY)
    wrap_first = Wrap(first)
    act_first = wrap_first.mlp.activation

    def make_act():
        return lambda x: x * 0.25

    second_act, second_act_again = make_act(), make_act()
    a = eqx.nn.MLP(2, 2, 4, 1, activation=second_act, key=_KEY)
    b = eqx.nn.MLP(2, 2, 4, 1, activation=second_act_again, key=_KEY)
    wa, wb = Wrap(a), Wrap(b)
    assert wa.mlp.activation is wb.mlp.activation is second_act
    assert b.activation is second_act_again  # The MLP that was passed in is untouched...
    assert wb.mlp is not b  # ...a new one was built,
    assert wb.mlp.layers[0].weight is b.layers[0].weight  # sharing its arrays.
    assert act_first is act


def test_jax_array_in_static_field_is_a_clear_error():
    class Bad(es.StableModule):
        weight: jax.Array = eqx.field(static=True)

    # `filterwarnings = error`: Equinox's own "A JAX array is being set as static!" warning
    # would surface here instead of our error if it came first.
    with pytest.raises(ValueError, match=r"`Bad\(\.\.\.\)`: the static field `Bad.weight` holds"):
        Bad(jnp.ones(3))
    with pytest.raises(ValueError, match=r"`Bad.weight\[1\]\['w'\]`.*Make `weight` a regular"):
        Bad((1, {"w": jnp.ones(3)}))  # pyright: ignore[reportArgumentType]


def test_numpy_array_in_static_field_is_fine():
    class Table(es.StableModule):
        table: np.ndarray = eqx.field(static=True)

    source = np.arange(3.0)
    m = Table(source)
    source[0] = 100.0  # The holder has its own copy.
    assert m.table[0] == 0.0
    with pytest.raises(ValueError, match="read-only"):
        m.table.array[0] = 1.0


def test_numpy_scalar_in_static_field_is_fine():
    # Equinox counts a NumPy scalar as an array and would warn (an error here).
    class Eps(es.StableModule):
        eps: Any = eqx.field(static=True)

        def __call__(self, x):
            return x + self.eps

    m = Eps(np.float32(1e-3))
    assert m.eps.dtype == np.float32 and float(m.eps) == pytest.approx(1e-3)
    assert Eps(np.float32(1e-3)).eps is m.eps
    np.testing.assert_allclose(eqx.filter_jit(lambda m, x: m(x))(m, jnp.zeros(2)), 1e-3)


def test_enum_and_class_in_static_fields_do_not_warn():
    # Enum members hash by identity and have no `__eq__` of their own, but they are singletons:
    # nothing to warn about. A class is its own canonical instance.
    class Options(es.StableModule):
        precision: jax.lax.Precision = eqx.field(static=True)
        layer_type: type = eqx.field(static=True)

        def __call__(self, x):
            return jnp.dot(x, x, precision=self.precision)

    run, traces = _counting_jit(lambda model, x: model(x))
    for _ in range(3):
        out = run(Options(jax.lax.Precision.HIGHEST, eqx.nn.Linear), _X)
        np.testing.assert_allclose(out, 5.25, rtol=1e-6)
    assert traces() == 1


def test_built_under_filter_vmap():
    # An ensemble: leaves are batched tracers while `__init__` runs; callables still interned.
    class Member(es.StableModule):
        mlp: eqx.nn.MLP

        def __init__(self, key):
            self.mlp = eqx.nn.MLP(3, 3, 4, 1, activation=lambda x: 0.5 * x, key=key)

    keys = jr.split(_KEY, 4)
    a, b = eqx.filter_vmap(Member)(keys), eqx.filter_vmap(Member)(keys)
    assert a.mlp.layers[0].weight.shape == (4, 4, 3)
    assert a.mlp.activation is b.mlp.activation
    out = eqx.filter_vmap(lambda m, x: m.mlp(x), in_axes=(eqx.if_array(0), None))(a, _X)
    reference = Member(keys[1]).mlp(_X)
    np.testing.assert_allclose(out[1], reference, rtol=1e-5, atol=1e-6)


class OnlyHash:
    def __hash__(self):
        return 0


def test_static_hash_without_eq_warns_naming_class_and_field():
    class Holder(es.StableModule):
        thing: OnlyHash = eqx.field(static=True)

    with pytest.warns(es.StabilityWarning, match=r"`Holder.thing`.*test_module.OnlyHash") as rec:
        Holder(OnlyHash())
    assert rec[0].filename == __file__  # Pointed at the user's line.


def test_dynamic_hash_without_eq_warns_naming_class_and_field():
    class Holder(es.StableModule):
        things: tuple

    with pytest.warns(es.StabilityWarning, match=r"`Holder.things\[1\]`.*OnlyHash"):
        Holder((1, OnlyHash()))


#
# Equinox's own patterns keep working.
#


class AbstractActivation(es.StableModule):
    fn: eqx.AbstractVar[Callable]

    @abc.abstractmethod
    def __call__(self, x): ...


class Activation(AbstractActivation):
    fn: Callable
    sizes: Sequence[int] = eqx.field(static=True, converter=lambda s: list(s))  # Then a tuple.
    gain: float = eqx.field(converter=float)
    checked: list = dataclasses.field(default_factory=list, repr=False, init=False)

    def __post_init__(self):
        self.fn = ft.partial(jnp.multiply, self.gain)

    def __check_init__(self):
        if self.gain <= 0:
            raise ValueError("`Activation(gain=...)` must be positive.")
        # Static fields are already in their canonical form here.
        assert type(self.sizes) is tuple

    def __call__(self, x):
        return self.fn(x) + len(self.sizes)


def test_abstract_final_check_init_converter_post_init():
    with pytest.raises(TypeError, match="abstract"):
        AbstractActivation()  # pyright: ignore
    run, traces = _counting_jit(lambda model, x: model(x))
    for _ in range(5):
        m = Activation(fn=None, sizes=(1, 2), gain=3)  # pyright: ignore[reportArgumentType]
        assert m.sizes == (1, 2) and type(m.gain) is float
        np.testing.assert_allclose(run(m, _X), 3.0 * _X + 2, rtol=1e-6)
    assert traces() == 1
    with pytest.raises(ValueError, match="must be positive"):
        Activation(fn=None, sizes=(), gain=-1)  # pyright: ignore[reportArgumentType]


def test_subclass_of_a_stable_module_stays_stable():
    class Base(es.StableModule):
        config: dict = eqx.field(static=True)

    class Child(Base):
        fn: Callable

        def __init__(self):
            self.config = {"a": [1]}
            self.fn = lambda x: x + 1

    assert Child().config == FrozenDict({"a": (1,)})
    assert Child().fn is Child().fn


def test_plain_base_class_is_not_changed():
    class PlainBase(eqx.Module):
        config: tuple = eqx.field(static=True)

    class Stable(PlainBase, es.StableModule):
        pass

    assert Stable(config=[1, 2]).config == (1, 2)  # pyright: ignore[reportArgumentType]
    assert PlainBase(config=[1, 2]).config == [1, 2]  # pyright: ignore[reportArgumentType]


def test_tree_at_edits_are_not_canonical_until_stabilized():
    run, traces = _counting_jit(lambda model, x: model(x))
    base = LambdaField()

    # Editing arrays (the usual `tree_at`) leaves the canonical callables in place.
    class WithWeight(es.StableModule):
        fn: Callable
        w: jax.Array

        def __call__(self, x):
            return self.fn(x) * self.w

    m = WithWeight(fn=lambda x: x + 1, w=jnp.ones(3))
    m2 = eqx.tree_at(lambda t: t.w, m, 2 * jnp.ones(3))
    assert m2.fn is m.fn

    # Editing a callable with `tree_at` bypasses `__init__`: the new leaf is not interned...
    def edit():
        return eqx.tree_at(lambda t: t.fn, base, lambda x: 5.0 * x)

    assert edit().fn is not edit().fn
    # ...until `es.stabilize` is called on the result (or the module is constructed anew).
    edited = [es.stabilize(edit()) for _ in range(3)]
    assert edited[0].fn is edited[1].fn is edited[2].fn
    for e in edited:
        np.testing.assert_allclose(run(e, _X), 5.0 * _X, rtol=1e-6)
    assert traces() == 1
