"""A large `PyTreeDef` held as a static value (attack 15b-05): one of tuples, lists and `None`
only is keyed by its text, which names every node exactly and holds no node data, rather than
node by node (a treedef of 12,000 leaves ran past the object budget: a key equal to nothing,
and every call traced, 356 ms a call where `equinox.filter_jit` hits). Any other large one
(dicts, Equinox modules, named tuples: node data or other node types) is keyed node by node,
type-exactly, as before."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


# Structures of tuples, lists and `None` around leaves (`0`).
plain = st.recursive(
    st.one_of(st.just(0), st.none()),
    lambda inner: st.one_of(st.tuples(inner, inner), st.lists(inner, max_size=3), st.tuples(inner)),
    max_leaves=6,
)


def _big(unit: Any) -> Any:
    return jax.tree.structure([unit] * 600)  # Over 512 nodes, whatever the unit.


@settings(deadline=None, max_examples=80)
@given(plain, plain)
def test_a_plain_structure_keys_equal_exactly_when_equal(a, b):
    ta, tb = _big(a), _big(b)
    assert "treedef-plain" in repr(es.stable_key(ta))  # The path under test.
    assert (es.stable_key(ta) == es.stable_key(tb)) == (ta == tb)


def test_other_large_structures_are_keyed_node_by_node_type_exactly():
    # JAX's own `==` takes `1` and `1.0` in a dict's keys for one: the keys do not.
    ints, floats = _big({1: 0}), _big({1.0: 0})
    assert ints == floats and es.stable_key(ints) != es.stable_key(floats)
    assert es.stable_key(ints) == es.stable_key(_big({1: 0}))


class _Tag:
    """Node data whose text is the same whatever it holds."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, _Tag) and self.value == other.value

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return "Tag"


class _Node:
    def __init__(self, tag, child):
        self.tag, self.child = tag, child


jax.tree_util.register_pytree_node(
    _Node, lambda n: ((n.child,), n.tag), lambda tag, children: _Node(tag, *children)
)


@pytest.mark.parametrize("node", [lambda t: _Node(t, 0), lambda t: {t: 0}], ids=["custom", "dict"])
def test_node_data_its_text_hides_is_keyed(node):
    ints, floats = _big(node(_Tag(1))), _big(node(_Tag(1.0)))
    assert ints == floats and str(ints) == str(floats)
    assert es.stable_key(ints) != es.stable_key(floats)


def _node_class():
    class Node:  # One name, a new class each time.
        def __init__(self, child):
            self.child = child

    jax.tree_util.register_pytree_node(
        Node, lambda n: ((n.child,), None), lambda _, children: Node(*children)
    )
    return Node


def test_node_types_of_one_name_and_no_data_are_told_apart():
    a, b = _node_class(), _node_class()
    ta, tb = _big(a(0)), _big(b(0))
    assert ta != tb and str(ta) == str(tb)
    assert es.stable_key(ta) != es.stable_key(tb)


class _Packed(eqx.Module):
    flat: jax.Array
    treedef: Any = eqx.field(static=True)


@pytest.mark.counts_traces
def test_a_static_treedef_of_twelve_thousand_leaves_hits():
    traces = 0

    @es.filter_jit
    def step(m, x):
        nonlocal traces
        traces += 1
        return x + m.treedef.num_leaves

    x = jnp.zeros(())
    for _ in range(3):  # Rebuilt each time, as a training loop does.
        params = [(i, None) for i in range(12_000)]
        m = _Packed(jnp.zeros(3), jax.tree.structure(params))
        assert float(step(m, x)) == 12_000.0
    assert traces == 1
    assert step.cache_info()[:2] == (2, 1)
