"""A partial can change in place whatever it holds (attack round 10a, finding 01): its keywords
dict, empty or not (`p.keywords["s"] = 10.0`), and everything through `__setstate__`. So `intern`
never substitutes one partial for another (CONTRACT section 1, "intern never changes behaviour"),
while equal partials keep equal keys, and `es.filter_jit` shares their program until one changes."""

import functools as ft

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
import pytest

import eqxstable as es

from .helpers import count_traces, counting_filter_jit


def _scale(x, s=1.0):
    return x * s


_MAKERS = {
    "functools.partial": lambda: ft.partial(_scale, 2.0),
    "jtu.Partial": lambda: jtu.Partial(_scale, 2.0),
    "eqx.Partial": lambda: eqx.Partial(_scale, 2.0),
}


@pytest.mark.parametrize("name", list(_MAKERS))
def test_an_equal_partial_is_never_substituted(name):
    p1, p2 = _MAKERS[name](), _MAKERS[name]()
    assert es.stable_key(p1) == es.stable_key(p2)
    assert es.intern(p1) is p1
    r2 = es.intern(p2)
    assert r2 is p2
    p1.keywords["s"] = 10.0  # The program changes its own partial.
    assert float(r2()) == float(p2()) == 2.0
    assert float(p1()) == 20.0


@pytest.mark.parametrize("name", ["functools.partial", "jtu.Partial"])
def test_setstate_of_the_first_partial_changes_nothing_else(name):
    q1, q2 = _MAKERS[name](), _MAKERS[name]()
    es.intern(q1)
    r = es.intern(q2)
    q1.__setstate__((_scale, (4.0,), {}, None))
    assert float(r()) == float(q2()) == 2.0


def test_stabilize_keeps_each_partial():
    p1, p2 = ft.partial(_scale, 2.0), ft.partial(_scale, 2.0)
    a, b = es.stabilize([p1]), es.stabilize([p2])
    p1.keywords["s"] = 10.0
    assert float(b[0]()) == 2.0 and float(a[0]()) == 20.0


@pytest.mark.counts_traces
@pytest.mark.parametrize("change", ["keywords", "setstate"])
def test_the_jit_shares_equal_partials_until_one_changes(change):
    counter = count_traces(lambda p, x: p(x))
    run = es.filter_jit(counter)

    x = jnp.float32(1.0)
    p1, p2 = ft.partial(_scale, s=2.0), ft.partial(_scale, s=2.0)
    assert float(run(p1, x)) == 2.0
    assert float(run(p2, x)) == 2.0
    assert counter.count == 1  # Equal partials share one program.
    if change == "keywords":
        p2.keywords["s"] = 5.0
    else:
        p2.__setstate__((_scale, (), {"s": 5.0}, None))  # pyright: ignore
    assert float(run(p2, x)) == float(p2(x)) == 5.0
    assert float(run(p1, x)) == float(p1(x)) == 2.0
    assert counter.count == 2
    # An empty keywords dict filled in place after the trace is seen too.
    p3 = ft.partial(_scale)
    assert float(run(p3, x)) == 1.0
    p3.keywords["s"] = 7.0
    assert float(run(p3, x)) == 7.0


class _Holder(es.StableModule):
    fn: ft.partial = eqx.field(static=True)

    def __call__(self, x):
        return self.fn(x)


@pytest.mark.counts_traces
def test_stable_modules_share_a_program_and_keep_their_own_partial():
    run, traces = counting_filter_jit(lambda m, x: m(x))

    x = jnp.float32(1.0)
    p1, p2 = ft.partial(_scale), ft.partial(_scale)  # Empty keywords, filled later.
    a, b = _Holder(p1), _Holder(p2)
    assert a.fn is p1 and b.fn is p2  # Never substituted.
    assert float(run(a, x)) == float(run(b, x)) == 1.0
    assert traces() == 1  # Still one program under plain Equinox.
    p2.keywords["s"] = 5.0
    assert float(b(x)) == 5.0 and float(a(x)) == 1.0
    assert float(run(_Holder(p2), x)) == 5.0
