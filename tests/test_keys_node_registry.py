"""A custom pytree node's registered flatten and unflatten run in the trace (the argument is
rebuilt there): the globals they read are part of the call's key."""

import jax
import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._keys._structure import _registered


SCALE = 2.0


class Box:
    def __init__(self, v):
        self.v = v


def _flatten(b):
    return (b.v,), None


def _unflatten(aux, children):
    b = Box(children[0])
    b.scale = SCALE  # pyright: ignore
    return b


jax.tree_util.register_pytree_node(Box, _flatten, _unflatten)


def test_jax_registry_is_readable():
    # The private table the keys read: a JAX that moves it fails here, not silently.
    assert _registered(Box) == (_flatten, _unflatten)
    assert _registered(int) == ()


@pytest.mark.counts_traces
def test_unflatten_reading_a_global():
    global SCALE
    traces = 0

    def f(b):
        nonlocal traces
        traces += 1
        return b.v * b.scale

    w = es.filter_jit(f)
    try:
        assert float(w(Box(jnp.float32(1.0)))) == 2.0
        assert float(w(Box(jnp.float32(1.0)))) == 2.0
        SCALE = 3.0
        assert float(w(Box(jnp.float32(1.0)))) == 3.0
        assert traces == 2
    finally:
        SCALE = 2.0


# Attack round 8a, finding 21: a treedef held as a value, and a node object read by a function,
# run the registered functions too: the globals they read are in the reader's key.
OFFSET = 0.0


class Cell:
    def __init__(self, v):
        self.v = v


def _cell_flatten(c):
    return (c.v + OFFSET,), None


def _cell_unflatten(aux, children):
    return Cell(children[0] + OFFSET)


jax.tree_util.register_pytree_node(Cell, _cell_flatten, _cell_unflatten)
CELL_TREEDEF = jax.tree_util.tree_structure(Cell(0.0))
CELL = Cell(1.0)


def _unflattens():
    return lambda x: jax.tree_util.tree_unflatten(CELL_TREEDEF, [x]).v


def _flattens():
    return lambda x: x * jax.tree_util.tree_leaves(CELL)[0]


@pytest.mark.parametrize("make", [_unflattens, _flattens])
def test_registered_functions_of_a_treedef_or_node_read_by_a_function(make):
    # Eager Python, `es.filter_jit` on a rebuilt function and the key agree after a global
    # that the registered functions read is rebound.
    global OFFSET
    x = jnp.float32(1.0)
    try:
        before = es.stable_key(make())
        assert float(es.filter_jit(make())(x)) == float(make()(x))
        OFFSET = 2.0
        assert es.stable_key(make()) != before
        assert float(es.filter_jit(make())(x)) == float(make()(x)) == 3.0
    finally:
        OFFSET = 0.0
    assert es.stable_key(make()) == before
