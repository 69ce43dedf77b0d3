"""Equivalent static objects are interchangeable while a trace reads their values, not while it
compares their identities: `f(g, g)` and `f(g1, g2)` (rebuilt lambdas, equal keys) must not share
a program, since the function can tell (`a is b`), nor an output that returns one of them. Which
static objects are the same object is part of the cache key (`_cache._aliases`), and a call's
output takes its objects from its own arguments, also while other threads call the same
wrapper."""

import sys
import threading

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import eqxstable as es


def _fresh():
    return lambda x: x * 2


def _same(a, b, x):
    return x if a is b else -x


class _Pair(eqx.Module):
    a: object = eqx.field(static=True)
    b: object = eqx.field(static=True)


_CASES = {
    "arguments": (lambda a, b, x: _same(a, b, x), lambda w, a, b, x: w(a, b, x)),
    "tuple": (lambda t, x: _same(t[0], t[1], x), lambda w, a, b, x: w((a, b), x)),
    "static-fields": (lambda p, x: _same(p.a, p.b, x), lambda w, a, b, x: w(_Pair(a, b), x)),
}


@pytest.mark.counts_traces
@pytest.mark.parametrize("case", list(_CASES))
def test_one_object_twice_and_two_equivalent_objects_are_traced_apart(case):
    fn, call = _CASES[case]
    traces = 0

    def body(*args):
        nonlocal traces
        traces += 1
        return fn(*args)

    wrapper = es.filter_jit(body)
    x = jnp.float32(1.0)
    g, g1, g2 = _fresh(), _fresh(), _fresh()
    assert float(call(wrapper, g, g, x)) == 1.0
    assert float(call(wrapper, g1, g2, x)) == -1.0
    assert traces == 2
    # Each pattern is then a hit, with other equivalent objects too.
    assert float(call(wrapper, g2, g2, x)) == 1.0
    assert float(call(wrapper, g2, g1, x)) == -1.0
    assert traces == 2
    miss = wrapper.misses[-1]
    assert miss.kind == "identity" and "one object" in miss.reason


@pytest.mark.counts_traces
def test_an_output_is_the_object_at_its_own_place():
    wrapper = es.filter_jit(lambda a, b, x: (x * 2, b))
    x = jnp.float32(1.0)
    g = _fresh()
    assert wrapper(g, g, x)[1] is g
    g1, g2 = _fresh(), _fresh()
    assert wrapper(g1, g2, x)[1] is g2
    assert wrapper(g2, g1, x)[1] is g1


def _race(*targets):
    """Runs each target in a thread of its own, switching threads as often as Python can."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=t) for t in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)


def test_threads_get_their_own_objects_back():
    wrapper = es.filter_jit(lambda x, f: (x * 2, f))
    x = jnp.ones(2)
    wrapper(x, _fresh())
    wrong = []

    def run():
        for _ in range(200):
            f = _fresh()
            if wrapper(x, f)[1] is not f:
                wrong.append(f)

    _race(run, run, run, run)
    assert wrong == []


def test_a_call_inside_its_own_trace_leaves_the_outer_calls_objects():
    # The inner call (an equivalent static, under `jax.vmap`) makes the entry hold its objects
    # while the outer trace runs; the outer call's output is still its own `cfg`.
    def f(x, cfg):
        if x.ndim > 1:
            return jax.vmap(lambda r: wrapper(r, _fresh())[0])(x), cfg
        return x * 2, cfg

    wrapper = es.filter_jit(f)
    x = jnp.ones((2, 3))
    for _ in range(3):
        cfg = _fresh()
        out, got = wrapper(x, cfg)
        assert got is cfg and float(out.sum()) == 12.0


def test_clearing_caches_while_other_threads_call():
    wrapper = es.filter_jit(lambda x, k: x * k)
    x = jnp.ones(2)
    errors = []

    def call():
        for i in range(100):
            try:
                assert float(wrapper(x, float(i % 3))[0]) == float(i % 3)
            except Exception as e:  # noqa: BLE001 - any error is the failure reported below.
                errors.append(e)

    def clear():
        for i in range(30):
            es.clear_caches() if i % 2 else jax.clear_caches()

    _race(call, call, clear)
    assert errors == []
