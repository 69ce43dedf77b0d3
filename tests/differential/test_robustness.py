"""Differential situations: hostile objects. Each must give the right answer, falling back to
identity or a recompile: never a crash, a hang or a `RecursionError` (issue 9, item 7)."""

import functools as ft
import itertools

import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es

from .harness import check, MODES, Situations


SITUATIONS = Situations()


def _by_k(c, x):
    return x * c.k


class _ByK:
    def __init__(self, k):
        self.k = k

    def __eq__(self, other):
        return type(other) is type(self) and self.k == other.k

    def __hash__(self):
        return hash(self.k)


class ReprRaises(_ByK):
    def __repr__(self):
        raise RuntimeError("no repr for you")


class EqRaises(_ByK):
    def __eq__(self, other):
        raise RuntimeError("no == for you")

    __hash__ = _ByK.__hash__


class HashRaises(_ByK):
    def __hash__(self):
        raise RuntimeError("no hash for you")


class EqReturnsArray(_ByK):
    def __eq__(self, other):
        return np.array([True, False])

    __hash__ = _ByK.__hash__


_counter = itertools.count()


class HashChanges(_ByK):
    def __hash__(self):
        return next(_counter)


class HashWithoutEq:
    """Defines `__hash__` but not `__eq__`: `es.StabilityWarning` territory."""

    def __init__(self, k):
        self.k = k

    def __hash__(self):
        return 0


class Anything:
    """Every attribute exists (a mock): `__wrapped__`, `_fun`, `func`, ... all return itself."""

    def __init__(self, k):
        self.__dict__["k"] = k

    def __getattr__(self, name):
        if name.startswith("__") and name not in ("__wrapped__", "__func__", "__self__"):
            raise AttributeError(name)
        return self

    def __call__(self, x):
        return x * self.__dict__["k"]


@SITUATIONS.add
def repr_raises(h):
    for k in (2.0, 3.0):
        h.call(ReprRaises(k), jnp.ones(2), apply=_by_k, box=True)
    for k in (2.0, 3.0):
        h.call(ReprRaises(k), jnp.ones(2), apply=_by_k)


@SITUATIONS.add
def eq_raises(h):
    for k in (2.0, 3.0, 2.0):
        h.call(EqRaises(k), jnp.ones(2), apply=_by_k, box=True)


@SITUATIONS.add
def hash_raises(h):
    for k in (2.0, 3.0):
        h.call(HashRaises(k), jnp.ones(2), apply=_by_k, box=True)


@SITUATIONS.add
def eq_returns_an_array(h):
    for k in (2.0, 3.0):
        h.call(EqReturnsArray(k), jnp.ones(2), apply=_by_k, box=True)


@SITUATIONS.add
def hash_changes_every_call(h):
    for k in (2.0, 3.0, 2.0):
        h.call(HashChanges(k), jnp.ones(2), apply=_by_k, box=True)


@SITUATIONS.add
def hash_without_eq(h):
    for k in (2.0, 3.0):
        h.call(HashWithoutEq(k), jnp.ones(2), apply=_by_k, box=True)


def _call(fn, x):
    return fn(x)


@SITUATIONS.add
def wrapped_is_itself(h):
    """`f.__wrapped__ = f`: a cyclic `__wrapped__` chain, reached through a closure and a
    partial. Never as a module field or the jitted function itself: Equinox loops forever on
    such a function in a module field, and `equinox.filter_jit(f)` refuses it."""

    def f(x):
        return x * 2.0

    def g(x):
        return x * 3.0

    f.__wrapped__ = f  # pyright: ignore[reportFunctionMemberAccess]
    g.__wrapped__ = f  # pyright: ignore[reportFunctionMemberAccess]
    h.call(lambda x: f(x), jnp.ones(2))
    h.call(lambda x: g(x), jnp.ones(2))
    h.call(ft.partial(g), jnp.ones(2))


@SITUATIONS.add
def wrapped_two_cycle(h):
    """`a.__wrapped__ = b` and `b.__wrapped__ = a`, through a closure and a partial (never a
    module field: Equinox itself loops forever there, see `wrapped_is_itself`)."""

    def a(x):
        return x * 2.0

    def b(x):
        return x * 3.0

    a.__wrapped__ = b  # pyright: ignore[reportFunctionMemberAccess]
    b.__wrapped__ = a  # pyright: ignore[reportFunctionMemberAccess]
    h.call(ft.partial(a), jnp.ones(2))
    h.call(ft.partial(b), jnp.ones(2))
    h.call(lambda x: a(x) + b(x), jnp.ones(2))


@SITUATIONS.add
def mock_like_object(h):
    for k in (2.0, 3.0):
        h.call(Anything(k), jnp.ones(2), apply=_call, box=True)


def _nested(leaf, depth):
    for _ in range(depth):
        leaf = (leaf,)
    return leaf


def _innermost(t, x):
    while isinstance(t, tuple):
        t = t[0]
    return x * t


@SITUATIONS.add
def tuple_nested_500_deep(h):
    for leaf in (2.0, 3.0):
        h.call(_nested(leaf, 500), jnp.ones(2), apply=_innermost, box=True)


@SITUATIONS.add
def closure_over_a_tuple_nested_500_deep(h):
    for leaf in (2.0, 3.0):
        t = _nested(leaf, 500)
        h.call(lambda x: _innermost(t, x), jnp.ones(2))  # noqa: B023


@SITUATIONS.add
def self_referencing_list(h):
    c: list = [2.0]
    c.append(c)
    apply = lambda c, x: x * c[0] * len(c[1])  # noqa: E731
    h.call(c, jnp.ones(2), apply=apply, box=True)
    c[0] = 3.0
    h.call(c, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def self_referencing_dict_through_a_closure(h):
    d: dict = {"k": 2.0}
    d["self"] = d
    f = lambda x: x * d["self"]["k"]  # noqa: E731
    h.call(f, jnp.ones(2))
    d["k"] = 3.0
    h.call(f, jnp.ones(2))


def test_miss_reasons_of_a_static_whose_repr_raises():
    """The miss message names old and new values: it must not call a raising `__repr__`."""
    es.clear_caches()
    run = es.filter_jit(_by_k, on_recompile="warn")
    x = jnp.ones(2)
    run(ReprRaises(2.0), x)
    with pytest.warns(es.RecompileWarning):
        out = run(ReprRaises(3.0), x)
    np.testing.assert_allclose(out, 3.0 * np.ones(2))
    assert len(run.misses) == 2
    assert isinstance(run.misses[-1].reason, str) and run.misses[-1].reason
    assert isinstance(run.explain(), str)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_robustness(situation, mode):
    check(situation, mode)
