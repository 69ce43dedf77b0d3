"""Static fields of a `StableModule` read back as assigned, and never share a program by mistake.

Code that runs on an `eqx.Module` runs unchanged on a `StableModule` (CONTRACT section 2): each
case is written the way a user writes it (a permutation layer of a flow, a mask, a config dict)
and run on both, differentially: equal outputs and dtypes. Underneath, what JAX and Equinox
compare is one canonical object per value, type-exact under plain `eqx.filter_jit`.
"""

import copy
import dataclasses
import json
import pickle
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxstable as es

from .helpers import compile_log, counting_filter_jit, rebindable


def _permute_layer(base: type, name: str) -> type:
    """The permutation layer of a normalising flow, on `eqx.Module` or `es.StableModule`."""

    class Permute(base):
        perm: np.ndarray = eqx.field(static=True)
        mask: np.ndarray = eqx.field(static=True)
        config: dict = eqx.field(static=True)
        sizes: list = eqx.field(static=True)
        eps: np.float32 = eqx.field(static=True)
        n: np.int64 = eqx.field(static=True)
        weight: jax.Array

        def __call__(self, x):
            assert isinstance(self.config, dict) and self.config == {"scale": 2.0, "act": "tanh"}
            assert isinstance(self.sizes, list) and self.sizes == [4, 4]
            assert f"{self.eps:.0e}" == "1e-05" and round(self.n) == 3
            y = x[self.perm]
            y = jnp.where(self.mask, y, 0.0) + jnp.where(self.mask == 1, self.eps, 0.0)
            y = jnp.take(y, self.perm) * self.config["scale"] + len(self.sizes)
            return jnp.dot(self.weight, y) + self.n

        def inverse(self, y):
            return y[np.argsort(self.perm)]

    Permute.__name__ = Permute.__qualname__ = name  # Module-level, for pickle.
    return Permute


PlainPermute = _permute_layer(eqx.Module, "PlainPermute")
StablePermute = _permute_layer(es.StableModule, "StablePermute")


def _build(cls: type) -> Any:
    # Warnings off: Equinox warns about NumPy arrays in the static fields of its own modules.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(
            perm=np.array([3, 0, 2, 1]),
            mask=np.array([True, False, True, True]),
            config={"scale": 2.0, "act": "tanh"},
            sizes=[4, 4],
            eps=np.float32(1e-5),
            n=np.int64(3),
            weight=jnp.arange(12.0).reshape(3, 4),
        )


def test_flow_layer_runs_unchanged():
    x = jnp.array([1.0, 2.0, 3.0, 4.0])
    plain, stable = _build(PlainPermute), _build(StablePermute)
    expected, got = plain(x), stable(x)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(stable.inverse(x[stable.perm]), x)
    # Under plain `eqx.filter_jit`, rebuilt layers hit the cache (the plain module cannot be
    # jitted at all: its NumPy arrays are not hashable).
    run, traces = counting_filter_jit(lambda model, x: model(x))
    with compile_log() as log:
        for _ in range(3):
            np.testing.assert_array_equal(run(_build(StablePermute), x), expected)
    assert traces() == 1 == log.count("run")


def test_values_read_back_as_assigned_and_read_only():
    m = _build(StablePermute)
    assert type(m.perm) is np.ndarray and m.perm.dtype == np.int64
    assert type(m.eps) is np.float32 and type(m.n) is np.int64
    np.testing.assert_array_equal(m.mask == 1, [True, False, True, True])  # Elementwise.
    assert json.loads(json.dumps(m.config)) == {"scale": 2.0, "act": "tanh"}
    assert m.config | {"act": "relu"} == {"scale": 2.0, "act": "relu"}  # A new, plain dict.
    assert dict(m.config) == m.config and list(m.sizes) == m.sizes
    with pytest.raises(ValueError, match="read-only"):
        m.perm[0] = 1
    # A list or dict reads back as a plain copy (`_module/_plain.py`), the same one on every read
    # of this module, and the next read refuses a change to it (`_module/_handed.py`).
    config, sizes = m.config, m.sizes
    assert type(config) is dict and type(sizes) is list
    assert m.config is config and m.sizes is sizes
    config["scale"] = 3.0
    with pytest.raises(TypeError, match=r"`StablePermute.config\['scale'\]` was changed in place"):
        m.config  # noqa: B018
    config["scale"] = 2.0  # Another float object, with the same bits: no change.
    sizes.append(4)
    with pytest.raises(TypeError, match=r"`StablePermute.sizes` was changed in place"):
        m.sizes  # noqa: B018
    sizes.pop()
    assert m.config == {"scale": 2.0, "act": "tanh"} and m.sizes == _build(StablePermute).sizes


def test_what_jax_sees_is_canonical_and_type_exact():
    a, b = _build(StablePermute), _build(StablePermute)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    assert hash(jax.tree_util.tree_structure(a)) == hash(jax.tree_util.tree_structure(b))
    for name in ("perm", "mask", "config", "sizes", "eps", "n"):
        assert a.__dict__[name] is b.__dict__[name]
    assert a == b


def test_copies_pickles_and_tree_at_stay_canonical():
    m = _build(StablePermute)
    x = jnp.arange(4.0)
    for clone in (copy.copy(m), copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        for name in ("perm", "config", "sizes", "eps"):
            assert clone.__dict__[name] is m.__dict__[name]
        np.testing.assert_array_equal(clone(x), m(x))
    edited = eqx.tree_at(lambda t: t.weight, m, jnp.zeros((3, 4)))
    assert edited.config == m.config and edited.__dict__["perm"] is m.__dict__["perm"]
    np.testing.assert_array_equal(edited(x), jnp.full(3, 3.0))


@pytest.mark.parametrize(
    "first, second",
    [
        (2, 2.0),
        (2, True),
        (0.0, -0.0),
        ((1, 2), (1.0, 2.0)),
        ([1], [1.0]),
        ({"scale": 2}, {"scale": 2.0}),
        (np.float32(2), np.float64(2)),
        (np.array([2], dtype=np.int32), np.array([2], dtype=np.int64)),
    ],
    ids=repr,
)
def test_equal_values_of_other_types_never_share_a_program(first, second):
    # Python's `==` calls each pair equal; plain Equinox would serve the first program.
    class Scale(es.StableModule):
        factor: Any = eqx.field(static=True)

        def __call__(self, x):
            f = self.factor
            f = f["scale"] if isinstance(f, dict) else f
            f = f[0] if isinstance(f, (tuple, list, np.ndarray)) else f
            return (f * x, jnp.copysign(1.0, f))

    run, traces = counting_filter_jit(lambda model, x: model(x))
    x = jnp.array([1, 2**30], dtype=jnp.int32)
    for value in (first, second):
        got, sign = run(Scale(value), x)
        f = value["scale"] if isinstance(value, dict) else value
        f = f[0] if isinstance(f, (tuple, list, np.ndarray)) else f
        expected = jnp.asarray(f) * x
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
        assert float(sign) == np.copysign(1.0, float(f))
    assert traces() == 2


def test_narrow_dtypes_with_the_same_bytes_are_different_static_arrays():
    class Table(es.StableModule):
        table: np.ndarray = eqx.field(static=True)

    raw = np.array([7, 1], dtype=np.uint8)
    signed, unsigned = raw.view(jnp.int4), raw.view(jnp.uint4)
    assert signed.tobytes() == unsigned.tobytes()
    a, b = Table(signed), Table(unsigned)
    assert a.__dict__["table"] is not b.__dict__["table"]
    assert a.table.dtype == jnp.int4 and b.table.dtype == jnp.uint4
    fields_a = np.zeros(1, dtype=[("a", "<i4"), ("b", "<f4")])
    fields_b = np.zeros(1, dtype=[("a", "<f4"), ("b", "<i4")])
    assert Table(fields_a).__dict__["table"] is not Table(fields_b).__dict__["table"]


def test_check_init_and_converters_see_values_as_in_equinox():
    seen = []

    class Config(es.StableModule):
        sizes: tuple = eqx.field(static=True, converter=lambda s: tuple(int(n) for n in s))
        table: np.ndarray = eqx.field(static=True, converter=np.asarray)
        options: dict = eqx.field(static=True)

        def __check_init__(self):
            seen.append((type(self.sizes), type(self.table), type(self.options)))
            if self.table.sum() < 0:
                raise ValueError("`Config(table=...)` must be non-negative.")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # No "JAX array is being set as static" warning.
        m = Config([1.0, 2.0], [[1, 2]], {"depth": 2})
    ((sizes, table, options),) = seen
    assert sizes is tuple and table is np.ndarray and issubclass(options, dict)
    assert m.sizes == (1, 2) and m.table.shape == (1, 2) and m.options == {"depth": 2}
    with pytest.raises(ValueError, match="must be non-negative"):
        Config([1], [-5], {})


def test_field_metadata_is_as_declared():
    # The custom-field pattern of Equinox's own tests: metadata comes back as it was given.
    def my_field(*, foo: bool | None = None, **kwargs: Any):
        metadata = kwargs.pop("metadata", {})
        if foo is not None:
            metadata["foo"] = foo
        return eqx.field(metadata=metadata, **kwargs)

    class Example(es.StableModule):
        dynamic: jax.Array = my_field(foo=True)
        static: int = my_field(foo=False, static=True)
        config: dict = eqx.field(static=True, default_factory=dict)

    model = Example(dynamic=jnp.array(1), static=1)
    dynamic_field, static_field, config_field = dataclasses.fields(model)
    assert dynamic_field.metadata == dict(foo=True)
    assert static_field.metadata == dict(foo=False, static=True)
    assert config_field.metadata == dict(static=True)
    assert model.static == 1 and model.config == {}


def test_static_default_and_class_access():
    class Defaults(es.StableModule):
        depth: int = eqx.field(static=True, default=3)
        act: Any = eqx.field(static=True, default=jax.nn.relu)

    assert Defaults.depth == 3 and Defaults.act is jax.nn.relu
    m = Defaults()
    assert m.depth == 3 and m.act is jax.nn.relu
    assert Defaults(depth=4).depth == 4


def test_a_module_in_a_static_field_hashes():
    class Inner(es.StableModule):
        config: dict = eqx.field(static=True)

    class Outer(es.StableModule):
        inner: Inner = eqx.field(static=True)

        def __call__(self, x):
            return x * self.inner.config["k"]

    run, traces = counting_filter_jit(lambda model, x: model(x))
    for _ in range(2):
        np.testing.assert_array_equal(run(Outer(Inner({"k": 3})), jnp.ones(2)), [3.0, 3.0])
    assert traces() == 1
    assert hash(Inner({"k": 3})) == hash(Inner({"k": 3}))


def test_property_implementing_a_field_is_left_alone():
    class Abstract(es.StableModule):
        foo: int = eqx.field(init=False)

    class Concrete(Abstract):
        @property
        def foo(self):  # pyright: ignore[reportIncompatibleVariableOverride]
            return 1

    leaves, treedef = jax.tree_util.tree_flatten(Concrete())
    assert jax.tree_util.tree_unflatten(treedef, leaves).foo == 1


def test_training_loop_with_a_static_permutation():
    # A flow-like model trained with the standard loop: static permutation, dynamic weights.
    def make(base):
        class Layer(base):
            perm: np.ndarray = eqx.field(static=True)
            linear: eqx.nn.Linear

            def __call__(self, x):
                return self.linear(x[self.perm])

        return Layer

    def train(model):
        xs = jr.normal(jr.key(2), (16, 3))
        ys = xs[:, ::-1]

        @eqx.filter_jit
        def step(model):
            loss, grads = eqx.filter_value_and_grad(
                lambda m: jnp.mean((jax.vmap(m)(xs) - ys) ** 2)
            )(model)
            return jax.tree.map(lambda p, g: p - 0.1 * g, model, grads), loss

        loss = None
        for _ in range(20):
            model, loss = step(model)
        return model, loss

    perm, key = np.array([2, 1, 0]), jr.key(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Equinox warns about the plain module's NumPy array.
        plain, plain_loss = train(make(eqx.Module)(perm, eqx.nn.Linear(3, 3, key=key)))
    stable_model = make(es.StableModule)(perm, eqx.nn.Linear(3, 3, key=key))
    stable, stable_loss = train(stable_model)
    assert stable_loss is not None and plain_loss is not None
    assert stable_loss.dtype == plain_loss.dtype and float(stable_loss) < 0.5
    np.testing.assert_allclose(stable_loss, plain_loss, rtol=1e-6)
    np.testing.assert_allclose(stable.linear.weight, plain.linear.weight, rtol=1e-6)
    assert stable.__dict__["perm"] is stable_model.__dict__["perm"]


def test_a_rebound_closure_in_a_static_field_is_retraced_by_the_stable_filter_jit():
    # The canonical form is keyed by what it holds: a cell rebound after the first call is
    # noticed, and the program is traced again for the new value.
    class Holder(es.StableModule):
        fn: Any = eqx.field(static=True)

        def __call__(self, x):
            return self.fn(x)

    f, rebind = rebindable(2.0)
    run = es.filter_jit(lambda model, x: model(x))
    model = Holder(f)
    np.testing.assert_array_equal(run(model, jnp.ones(2)), [2.0, 2.0])
    rebind(3.0)
    np.testing.assert_array_equal(run(model, jnp.ones(2)), [3.0, 3.0])
    np.testing.assert_array_equal(run(Holder(f), jnp.ones(2)), [3.0, 3.0])
    # A module built after the rebinding holds another canonical form than the first module
    # (its function's key changed, so plain `eqx.filter_jit` traces it again too): one more
    # trace, never the first program.
    assert [m.kind for m in run.misses] == ["first", "mutated", "static"]


def test_a_changed_array_in_a_static_field_is_named_as_a_changed_value():
    # A miss keys a `StableModule`'s static value as its code reads it (a read-only array, keyed
    # by its bytes), not frozen again into a plain-module form (keyed by identity), so the new
    # value is named as a new value, not as a similar-looking object to build once.
    class Holder(es.StableModule):
        table: Any = eqx.field(static=True)

        def __call__(self, x):
            return x * self.table.sum()

    run = es.filter_jit(lambda model, x: model(x))
    np.testing.assert_array_equal(run(Holder(np.arange(3)), jnp.ones(2)), [3.0, 3.0])
    np.testing.assert_array_equal(run(Holder(np.arange(3) + 1), jnp.ones(2)), [6.0, 6.0])
    miss = run.misses[-1]
    assert (miss.kind, miss.path) == ("static", "args[0].table")
    assert "array([0, 1, 2]) -> ndarray array([1, 2, 3])" in miss.reason


def test_the_canonical_tables_callback_may_run_while_its_lock_is_held():
    # Garbage collection can run `_drop_array` (a weak reference callback) inside the locked
    # section of `_canonical_array`, on the same thread: with a plain lock that hung the suite.
    import threading

    from eqxstable._module import _arrays

    def collect_inside_the_lock():
        with _arrays._lock:
            _arrays._drop_array(("no such key",))

    worker = threading.Thread(target=collect_inside_the_lock, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the callback deadlocked on the table's lock"
