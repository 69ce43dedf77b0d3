"""Pytree node data built afresh by every flatten (issue 9, item 6): a custom node whose flatten
returns a new dict, and `jax.experimental.sparse.BCOO`. Node data is keyed by value, so twenty
calls are one trace and memory stays flat over a thousand calls; different node data is still a
different program."""

import gc
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse

import eqxstable as es


@jax.tree_util.register_pytree_node_class
class Scaled:
    """An array with a scale kept as node data, in a dict made anew by each flatten."""

    def __init__(self, value, scale):
        self.value = value
        self.scale = scale

    def tree_flatten(self):
        return (self.value,), {"scale": self.scale}

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], aux["scale"])


def _counted():
    traces = 0

    def apply(tree, x):
        nonlocal traces
        traces += 1
        if isinstance(tree, Scaled):
            return tree.value * tree.scale + x
        return tree @ x

    return apply, lambda: traces


def _inputs(kind: str):
    if kind == "dict":
        return lambda: Scaled(jnp.arange(3.0), 2.0), jnp.ones(3)
    return lambda: sparse.BCOO.fromdense(jnp.eye(3) * 2.0), jnp.arange(3.0)


@pytest.mark.parametrize("kind", ["dict", "bcoo"])
@pytest.mark.counts_traces
def test_twenty_calls_one_trace(kind):
    es.clear_caches()
    apply, traces = _counted()
    run = es.filter_jit(apply)
    make, x = _inputs(kind)
    outs = [run(make(), x) for _ in range(20)]
    out = outs[-1]
    expected = apply(make(), x)
    np.testing.assert_allclose(out, expected)
    assert traces() == 1 + 1  # One trace, plus the eager reference above.
    assert run.cache_info().misses == 1


@pytest.mark.parametrize("kind", ["dict", "bcoo"])
# In verify mode each hit is traced again and JAX keeps what it traced: not flat by design.
@pytest.mark.counts_traces
def test_memory_flat_over_a_thousand_calls(kind):
    es.clear_caches()
    apply, _ = _counted()
    run = es.filter_jit(apply)
    make, x = _inputs(kind)
    # Made before measuring (`BCOO.fromdense` allocates); each flatten still makes new node data.
    trees = [make() for _ in range(50)]
    for tree in trees[:20]:
        run(tree, x)
    # A thousand recompiles would take minutes: say so at once, it is the same failure.
    assert run.cache_info().misses == 1, (
        f"{run.cache_info().misses} traces in 20 calls: every call with fresh node data "
        "recompiles and keeps a cache entry"
    )
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20):
            for tree in trees:
                run(tree, x)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # A cache entry per call would keep 1 KiB or more each.
    assert grown < 256 * 1024, f"{grown / 1024:.0f} KiB kept over 1,000 calls"


def test_different_node_data_is_a_different_program():
    es.clear_caches()
    apply, traces = _counted()
    run = es.filter_jit(apply)
    x = jnp.ones(3)
    for scale in (2.0, 3.0, 2, 2.0):
        got = run(Scaled(jnp.arange(3.0), scale), x)
        expected = apply(Scaled(jnp.arange(3.0), scale), x)
        np.testing.assert_allclose(got, expected)
        assert got.dtype == expected.dtype


def test_node_data_holding_a_mutated_list():
    """Node data compared by value must not freeze what is mutable inside it."""
    es.clear_caches()
    apply, _ = _counted()
    run = es.filter_jit(lambda tree, x: tree.value * len(tree.scale) + x)
    scales = [1.0]
    tree = Scaled(jnp.arange(3.0), scales)
    np.testing.assert_allclose(run(tree, jnp.ones(3)), jnp.arange(3.0) + 1.0)
    scales.append(2.0)
    np.testing.assert_allclose(run(tree, jnp.ones(3)), jnp.arange(3.0) * 2.0 + 1.0)
