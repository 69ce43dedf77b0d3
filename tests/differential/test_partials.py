"""Differential situations: `functools.partial`, `jax.tree_util.Partial` and `equinox.Partial`
whose arguments, keywords or function change between calls, or whose keyword order matters."""

import functools as ft

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
import pytest

from .harness import check, MODES, Situations


SITUATIONS = Situations()


def _mul(x, s):
    return x * s


def _first_keyword(x, **kw):
    # Reads the keywords in their order: a partial's keyword order changes the answer.
    return x * next(iter(kw.values()))


@SITUATIONS.add
def partial_args_hold_a_list_mutated(h):
    s = [2.0]
    p = ft.partial(lambda lst, x: x * lst[0], s)
    h.call(p, jnp.ones(2))
    s[0] = 3.0
    h.call(p, jnp.ones(2))


@SITUATIONS.add
def partial_keywords_dict_mutated(h):
    p = ft.partial(_mul, s=2.0)
    h.call(p, jnp.ones(2))
    p.keywords["s"] = 3.0
    h.call(p, jnp.ones(2))


@SITUATIONS.add
def partial_keyword_order(h):
    """`partial(f, a=1, b=2)` and `partial(f, b=2, a=1)` are `==`, but `f` reads the order."""
    h.call(ft.partial(_first_keyword, a=1.0, b=2.0), jnp.ones(2))
    h.call(ft.partial(_first_keyword, b=2.0, a=1.0), jnp.ones(2))


@SITUATIONS.add
def partial_setstate_changes_its_function(h):
    p = ft.partial(_mul, s=2.0)
    h.call(p, jnp.ones(2))
    p.__setstate__((lambda x, s: x - s, (), {"s": 2.0}, None))  # pyright: ignore
    h.call(p, jnp.ones(2))


@SITUATIONS.add
def eqx_partial_keywords_mutated(h):
    """`p.keywords["s"] = 3.0` on an `eqx.Partial`."""
    p = eqx.Partial(_mul, s=2.0)
    h.call(p, jnp.ones(2))
    p.keywords["s"] = 3.0
    h.call(p, jnp.ones(2))


@SITUATIONS.add
def jtu_partial_rebuilt(h):
    for s in (2.0, 3.0, 2):
        h.call(jtu.Partial(_mul, s=s), jnp.array([1, 2], dtype=jnp.int32))


@SITUATIONS.add
def partial_of_a_closure_whose_cell_is_rebound(h):
    c = 2.0

    def f(x, y):
        return x * c + y

    def set_c(v):
        nonlocal c
        c = v

    h.call(ft.partial(f, y=1.0), jnp.ones(2))
    set_c(3.0)
    h.call(ft.partial(f, y=1.0), jnp.ones(2))


@SITUATIONS.add
def jtu_partial_whose_function_reads_a_global(h):
    h.module(
        """
    def scaled(x, y):
        return x * y * K

    for K in (2.0, 3.0):
        h.call(jtu.Partial(scaled, 1.0), jnp.ones(2))
    """,
        jtu=jtu,
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_partial(situation, mode):
    check(situation, mode)
