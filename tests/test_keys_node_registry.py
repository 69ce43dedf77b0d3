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
