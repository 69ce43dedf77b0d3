"""Library registries that the program extends are library *data* (attack round 9a, findings 05,
06, 07 and 09): a class's subclasses (`Term.__subclasses__()`), JAX's pytree registry
(`register_pytree_node` of a library class), `abc`'s virtual subclasses of a library `abc`
class (`numbers.Real.register(MyScalar)`) and a library `functools.singledispatch` function's
registry (`@lx.diagonal.register(MyOp)`). A fresh function built after the registration (which
`equinox.filter_jit` traces anew) must not reuse the program traced before it."""

import functools as ft
import numbers
import string
import textwrap
import types
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._keys._structure import _REGISTRY


try:
    import lineax

    lx: Any = lineax
except ImportError:  # The floor environment has no lineax.
    lx = None
needs_lineax = pytest.mark.skipif(lx is None, reason="lineax is not installed")


X = jnp.float32(1.0)


def _register_node(cls: type) -> None:
    if cls in _REGISTRY:
        pytest.skip(f"{cls.__name__} is registered already (this test ran before)")
    jax.tree_util.register_pytree_node(
        cls,
        lambda n: (tuple(vars(n).values()), tuple(vars(n))),
        lambda names, values: object.__new__(cls),
    )


def _placed(where: str, value, body):
    """A factory of fresh functions that reach `value` as a global, a closure cell, a default
    argument or a user module's attribute, and compute `body(value, x)`."""
    if where == "global":
        g = {"VALUE": value, "body": body}
        exec("def f(x):\n    return body(VALUE, x)", g)  # noqa: S102
        return lambda: types.FunctionType(g["f"].__code__, g)
    if where == "cell":

        def make_cell():
            v = value

            def f(x):
                return body(v, x)

            return f

        return make_cell
    if where == "default":

        def make_default():
            def f(x, v=value):
                return body(v, x)

            return f

        return make_default
    module = types.ModuleType("fix9f_registry_holder")
    module.VALUE = value  # pyright: ignore

    def make_module():
        def f(x):
            return body(module.VALUE, x)

        return f

    return make_module


PLACES = ("global", "cell", "default", "module")


def _check_all(makers: dict, change, shared: bool) -> None:
    """Each placement traced before `change()`, rebuilt after: `es.filter_jit` agrees with eager
    and traced the rebuilt function again, where it shared before (`shared`: a reader of
    `__subclasses__` is never shared)."""
    traces = {}
    for where, make in makers.items():
        counted, count = _counted(make)
        traces[where] = (counted, count)
        before = float(es.filter_jit(counted())(X))
        assert float(es.filter_jit(counted())(X)) == before
        # A rebuilt function shares the program before the change.
        assert count() == (1 if shared else 2), where
    change()
    for where, (counted, count) in traces.items():
        fresh = counted()
        assert float(es.filter_jit(fresh)(X)) == float(counted()(X)), where
        # Traced again (the eager call above counts once).
        assert count() == (1 if shared else 2) + 2, where


def _counted(make):
    """Fresh functions running `make()`'s, counting their runs in one `nonlocal` counter."""
    traces = 0

    def counted():
        f = make()

        def g(x):
            nonlocal traces
            traces += 1
            return f(x)

        return g

    return counted, lambda: traces


# Finding 05: a class's subclasses.


@pytest.mark.counts_traces
def test_subclasses_defined_later_are_seen():
    class Term:
        weight = 0.0

    class L1(Term):
        weight = 1.0

    traces = 0

    def make():
        def total(x):
            nonlocal traces
            traces += 1
            return x * sum(c.weight for c in Term.__subclasses__())

        return total

    assert float(es.filter_jit(make())(X)) == 1.0

    class L2(Term):
        weight = 10.0

    fresh = make()
    assert float(es.filter_jit(fresh)(X)) == float(fresh(X)) == 11.0
    assert traces == 3
    del L1, L2


def test_a_reader_of_subclasses_is_never_shared():
    def make():
        return lambda: object.__subclasses__()

    assert es.stable_key(make()) != es.stable_key(make())


# Finding 06: JAX's pytree registry, for a library class.


@pytest.mark.counts_traces
def test_pytree_registration_of_a_library_class_is_seen():
    cfg = textwrap.TextWrapper(width=7)
    traces = 0

    def make():
        def n_leaves(x):
            nonlocal traces
            traces += 1
            return x * len(jax.tree.leaves(cfg))

        return n_leaves

    assert float(es.filter_jit(make())(X)) == 1.0
    before = es.stable_key(make())
    _register_node(textwrap.TextWrapper)
    fresh = make()
    assert es.stable_key(fresh) != before
    assert float(es.filter_jit(fresh)(X)) == float(fresh(X)) > 1.0
    assert traces == 3


# Finding 07: a library `abc` class's virtual subclasses.


@pytest.mark.counts_traces
def test_register_with_a_library_abc_is_seen():
    class MyScalar:
        pass

    s = MyScalar()
    traces = 0

    def make():
        def scale(x):
            nonlocal traces
            traces += 1
            return x * (2.0 if isinstance(s, numbers.Real) else 1.0)

        return scale

    assert float(es.filter_jit(make())(X)) == 1.0
    numbers.Real.register(MyScalar)
    fresh = make()
    assert float(es.filter_jit(fresh)(X)) == float(fresh(X)) == 2.0
    assert traces == 3


# Finding 09: a library `functools.singledispatch` function's registry.


@needs_lineax
@pytest.mark.counts_traces
def test_singledispatch_register_is_seen():
    class MyOp(lx.MatrixLinearOperator):
        pass

    op = MyOp(jnp.eye(2) * 3.0, frozenset())
    traces = 0

    def make():
        def trace_of(x):
            nonlocal traces
            traces += 1
            return x * lx.diagonal(op).sum()

        return trace_of

    assert float(es.filter_jit(make())(X)) == 6.0
    assert float(es.filter_jit(make())(X)) == 6.0
    assert traces == 1

    @lx.diagonal.register(MyOp)
    def _(operator):
        return jnp.diag(operator.matrix) * 100.0

    fresh = make()
    assert float(es.filter_jit(fresh)(X)) == float(fresh(X)) == 600.0
    assert traces == 3


def test_replacing_a_registered_implementation_is_seen():
    # `register` for a class already in the registry keeps its length: the items are watched.
    @ft.singledispatch
    def scale(v):
        return 1.0

    def make():
        return lambda x: x * scale(1)

    scale.register(int, lambda v: 2.0)
    before = es.stable_key(make())
    f = make()
    es.stable_key(f)
    scale.register(int, lambda v: 3.0)
    assert es.stable_key(make()) != before
    assert es.stable_key(f) != before


# The registry kinds, each reached in every placement.


def _subclass_kind():
    class Base:
        weight = 0.0

    class A(Base):
        weight = 1.0

    holder: list[type] = [A]  # Alive for as long as `change` (`__subclasses__` holds them weakly).

    def change():
        class B(Base):
            weight = 10.0

        holder.append(B)

    body = lambda base, x: x * sum(c.weight for c in base.__subclasses__())  # noqa: E731
    return Base, body, change


def _pytree_kind():
    cfg = string.Template("$a")
    return cfg, (lambda c, x: x * len(jax.tree.leaves(c))), lambda: _register_node(string.Template)


def _abc_kind():
    class Scalar:
        pass

    return (
        Scalar(),
        (lambda s, x: x * (2.0 if isinstance(s, numbers.Real) else 1.0)),
        (lambda: numbers.Real.register(Scalar)),
    )


def _dispatch_kind():
    @ft.singledispatch
    def weight(v):
        return 1.0

    class Tag:
        pass

    tag = Tag()
    return (
        weight,
        (lambda w, x: x * w(tag)),
        lambda: weight.register(Tag, lambda v: 5.0),
    )


def _library_dispatch_kind():
    class Op(lx.MatrixLinearOperator):  # pyright: ignore[reportOptionalMemberAccess]
        pass

    op = Op(jnp.eye(2), frozenset())

    def change():
        lx.diagonal.register(Op, lambda o: jnp.diag(o.matrix) * 7.0)

    return lx.diagonal, (lambda d, x: x * d(op).sum()), change


def _method_kind():
    class Scaler:
        @ft.singledispatchmethod
        def weight(self, v):
            return 1.0

    class Tag:
        pass

    tag = Tag()

    def change():
        Scaler.__dict__["weight"].register(Tag, lambda self, v: 3.0)

    return Scaler(), (lambda s, x: x * s.weight(tag)), change


KINDS = {
    "subclasses": _subclass_kind,
    "pytree": _pytree_kind,
    "library-abc": _abc_kind,
    "singledispatch": _dispatch_kind,
    "library-singledispatch": _library_dispatch_kind,
    "singledispatchmethod": _method_kind,
}


@pytest.mark.counts_traces
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_registry_in_each_placement(kind):
    if kind == "library-singledispatch" and lx is None:
        pytest.skip("lineax is not installed")
    value, body, change = KINDS[kind]()
    makers = {where: _placed(where, value, body) for where in PLACES}
    _check_all(makers, change, shared=kind != "subclasses")


def test_attributes_set_on_a_dispatcher_are_keyed():
    @ft.singledispatch
    def scale(v):
        return scale.factor  # pyright: ignore

    scale.factor = 2.0  # pyright: ignore[reportAttributeAccessIssue]

    def make():
        return lambda x: x * scale(1)

    before = es.stable_key(make())
    assert es.stable_key(make()) == before
    scale.factor = 3.0  # pyright: ignore[reportAttributeAccessIssue]
    assert es.stable_key(make()) != before
