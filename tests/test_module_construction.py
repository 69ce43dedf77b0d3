"""`StableModule` at construction: warnings and errors for static fields, nested modules left
unchanged, and Equinox's own patterns (abstract/final classes, `__check_init__`, converters,
`__post_init__`, subclasses, `eqx.tree_at`)."""

import abc
import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import pytest

import eqxstable as es
from eqxstable._module._static import Static

from .helpers import counting_filter_jit
from .test_module import _KEY, _X, CASES, LambdaField


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


def test_jax_array_in_static_field_warns_as_in_equinox():
    class Bad(es.StableModule):
        weight: jax.Array = eqx.field(static=True)

    # As in an `eqx.Module`, a warning (with Equinox's words first, and the field and the fix),
    # once: Equinox's own check does not warn a second time. The array is kept.
    match = r"`Bad\(\.\.\.\)`: A JAX array is being set as static! The static field `Bad.weight`"
    with pytest.warns(es.StabilityWarning, match=match) as record:
        m = Bad(jnp.ones(3))
    assert len(record) == 1 and record[0].filename == __file__
    np.testing.assert_array_equal(m.weight, jnp.ones(3))
    with pytest.warns(UserWarning, match=r"`Bad.weight\[1\]\['w'\]`.*Make `weight` a regular"):
        Bad((1, {"w": jnp.ones(3)}))  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match=r"`eqxstable.stabilize`: the static field .* holds"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            es.stabilize(PlainBad(jnp.ones(3)))


class PlainBad(eqx.Module):
    weight: jax.Array = eqx.field(static=True)


def test_numpy_array_in_static_field_is_fine():
    class Table(es.StableModule):
        table: np.ndarray = eqx.field(static=True)

    source = np.arange(3.0)
    m = Table(source)
    assert m.table[0] == 0.0
    with pytest.raises(ValueError, match="read-only"):
        m.table[0] = 1.0
    # The module holds a frozen copy, so it cannot follow a change to the array it was given:
    # the next read says so rather than compute with the old contents.
    source[0] = 100.0
    with pytest.raises(TypeError, match=r"`Table\.table`: the array given .* changed in place"):
        m.table


def test_numpy_scalar_in_static_field_is_fine():
    # Equinox counts a NumPy scalar as an array and would warn (an error here).
    class Eps(es.StableModule):
        eps: Any = eqx.field(static=True)

        def __call__(self, x):
            return x + self.eps

    m = Eps(np.float32(1e-3))
    assert type(m.eps) is np.float32 and float(m.eps) == pytest.approx(1e-3)
    assert Eps(np.float32(1e-3)).__dict__["eps"] is m.__dict__["eps"]
    assert Eps(np.float64(1e-3)).__dict__["eps"] is not m.__dict__["eps"]
    np.testing.assert_allclose(eqx.filter_jit(lambda m, x: m(x))(m, jnp.zeros(2)), 1e-3)


def test_enum_and_class_in_static_fields_do_not_warn():
    # Enum members hash by identity and have no `__eq__` of their own, but they are singletons:
    # nothing to warn about. A class is its own canonical instance.
    class Options(es.StableModule):
        precision: jax.lax.Precision = eqx.field(static=True)
        layer_type: type = eqx.field(static=True)

        def __call__(self, x):
            return jnp.dot(x, x, precision=self.precision)

    run, traces = counting_filter_jit(lambda model, x: model(x))
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

    match = r"`Holder.thing`.*test_module_construction.OnlyHash"
    with pytest.warns(es.StabilityWarning, match=match) as rec:
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
    sizes: Sequence[int] = eqx.field(static=True, converter=lambda s: list(s))
    gain: float = eqx.field(converter=float)
    checked: list = dataclasses.field(default_factory=list, repr=False, init=False)

    def __post_init__(self):
        # A pytree partial (a `functools.partial` leaf is never substituted: it can change in
        # place, and plain Equinox compares it by identity).
        self.fn = jtu.Partial(jnp.multiply, self.gain)

    def __check_init__(self):
        if self.gain <= 0:
            raise ValueError("`Activation(gain=...)` must be positive.")
        # Static fields read back as assigned (after the converter): a list as a plain copy, the
        # same one on every read, whose change the next read refuses (the module keeps [1, 2]).
        sizes = self.sizes
        assert type(sizes) is list
        sizes.append(3)
        with pytest.raises(TypeError, match=r"`Activation.sizes` was changed in place"):
            self.sizes  # noqa: B018
        sizes.pop()
        assert self.sizes == [1, 2] and self.sizes is sizes

    def __call__(self, x):
        return self.fn(x) + len(self.sizes)


def test_abstract_final_check_init_converter_post_init():
    with pytest.raises(TypeError, match="abstract"):
        AbstractActivation()  # pyright: ignore
    run, traces = counting_filter_jit(lambda model, x: model(x))
    for _ in range(5):
        m = Activation(fn=None, sizes=(1, 2), gain=3)  # pyright: ignore[reportArgumentType]
        assert m.sizes == [1, 2] and type(m.gain) is float
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

    assert Child().config == {"a": [1]}
    assert Child().__dict__["config"] is Child().__dict__["config"]
    assert Child().fn is Child().fn


def test_plain_base_class_is_not_changed():
    class PlainBase(eqx.Module):
        config: tuple = eqx.field(static=True)

    class Stable(PlainBase, es.StableModule):
        pass

    stable = Stable(config=[1, 2])  # pyright: ignore[reportArgumentType]
    assert stable.config == [1, 2] and type(stable.__dict__["config"]) is Static
    plain = PlainBase(config=[1, 2])  # pyright: ignore[reportArgumentType]
    assert plain.__dict__["config"] == [1, 2] and type(plain.__dict__["config"]) is list
    assert dataclasses.fields(PlainBase) == dataclasses.fields(Stable)
    assert all(f.metadata == {"static": True} for f in dataclasses.fields(Stable))


def test_tree_at_edits_are_not_canonical_until_stabilized():
    run, traces = counting_filter_jit(lambda model, x: model(x))
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
