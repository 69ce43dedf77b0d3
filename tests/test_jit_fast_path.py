"""A hit whose output holds non-array leaves (a training step that returns its model, `(x, 1.0)`)
runs on JAX's C++ fast path, as `equinox.filter_jit`'s does (attack 11b-02). JAX takes a jitted
function off its fast path for good when the output it returned, flattened once more, has a leaf
that is not an array (`jax._src.pjit._get_fastpath_data`); every later call then goes back through
Python (`cache_miss`, which calls `_get_fastpath_data` again). No timing: the tests count how often
JAX's Python dispatch runs on hits."""

import contextlib
import functools as ft
from collections.abc import Iterator

import equinox as eqx
import jax
import jax._src.pjit as pjit
import jax.numpy as jnp
import jax.random as jr
import pytest

import eqxstable as es

from .helpers import returns_its_partial, scale_by


@contextlib.contextmanager
def _python_dispatches() -> Iterator[list]:
    """Records the result of each run of JAX's Python dispatch of a jitted call: `None` where it
    gave up on the fast path."""
    real = getattr(pjit, "_get_fastpath_data", None)
    if real is None:
        pytest.skip("this JAX has no `jax._src.pjit._get_fastpath_data` (see the test below)")
    seen = []

    def counting(*args, **kwargs):
        data = real(*args, **kwargs)
        seen.append(data)
        return data

    pjit._get_fastpath_data = counting
    try:
        yield seen
    finally:
        pjit._get_fastpath_data = real


def test_jax_still_decides_its_fast_path_where_these_tests_look():
    # Fails, rather than letting the tests below skip, when JAX moves the function they count.
    assert callable(getattr(pjit, "_get_fastpath_data", None))


# Verify mode traces every hit again and compares on the host, which dispatches through JAX's
# Python path: the counting tests are marked `counts_traces`, which that run skips.
def _hits_on_python_path(fn, *args, hits: int = 5) -> tuple[list, int]:
    with _python_dispatches() as seen:
        out = fn(*args)
        first = list(seen)
        del seen[:]
        for _ in range(hits):
            out = fn(*args)
        jax.block_until_ready(out)
        return first, len(seen)


@pytest.mark.counts_traces
@pytest.mark.parametrize("depth", [2, 40])
def test_a_step_that_returns_its_model_stays_on_the_fast_path(depth):
    model = eqx.nn.MLP(4, 4, 4, depth=depth, key=jr.key(0))
    x = jnp.ones((3, 4))

    def step(model, x):
        return model, jax.vmap(model)(x)

    first, slow = _hits_on_python_path(eqx.filter_jit(step), model, x)
    assert slow == 0  # Equinox's own, as the reference.
    w = es.filter_jit(step)
    first, slow = _hits_on_python_path(w, model, x)
    # The first call recorded fast-path data; no hit came back to JAX's Python dispatch.
    assert any(data is not None for data in first)
    assert slow == 0
    out, y = w(model, x)
    assert type(out) is eqx.nn.MLP
    assert out.activation is model.activation
    assert y.tolist() == jax.vmap(model)(x).tolist()


@pytest.mark.counts_traces
def test_a_plain_value_beside_an_array_stays_on_the_fast_path():
    w = es.filter_jit(lambda x: (x * 2, 1.0, "tag", None))
    x = jnp.arange(3.0)
    first, slow = _hits_on_python_path(w, x)
    assert any(data is not None for data in first)
    assert slow == 0
    y, one, tag, none = w(x)
    assert y.tolist() == [0.0, 2.0, 4.0]
    assert type(one) is float and one == 1.0 and tag == "tag" and none is None


@pytest.mark.counts_traces
def test_a_returned_static_input_is_the_callers_own_on_the_fast_path():
    step, traces = returns_its_partial()
    w = es.filter_jit(step)
    x = jnp.ones(2)
    p1, p2 = ft.partial(scale_by, s=2.0), ft.partial(scale_by, s=2.0)
    with _python_dispatches() as seen:
        assert w(x, p1)[1] is p1
        del seen[:]
        for _ in range(3):
            for p in (p2, p1):
                y, out = w(x, p)
                assert out is p
                assert y.tolist() == [2.0, 2.0]
        assert seen == []
    assert traces() == 1


def test_a_lowered_and_compiled_call_rebuilds_its_output():
    w = es.filter_jit(lambda x, p: (p(x), p, 3))
    x = jnp.ones(2)
    p1, p2 = ft.partial(scale_by, s=2.0), ft.partial(scale_by, s=2.0)
    compiled = w.lower(x, p1).compile()
    y, out, three = compiled(x, p2)
    assert out is p2 and three == 3 and y.tolist() == [2.0, 2.0]


def test_under_transformations_the_output_is_the_users():
    w = es.filter_jit(lambda x: (x * 3.0, 2.0))

    def loss(x):
        y, scale = w(x)
        assert type(scale) is float
        return (y * scale).sum()

    x = jnp.arange(3.0)
    assert jax.grad(loss)(x).tolist() == [6.0, 6.0, 6.0]
    assert jax.vmap(loss)(jnp.ones((2, 3))).tolist() == [18.0, 18.0]
    assert jax.jit(loss)(x) == 18.0
    with jax.disable_jit():
        y, scale = w(x)
    assert type(scale) is float and y.tolist() == [0.0, 3.0, 6.0]
