"""A dynamic field's stored words are sealed by a checksum `c` and its complement `~c`
(`eqxstable/_module/_dynamic.py`), so that elementwise arithmetic over all array leaves that
picks or clips the words by their integer value (a maximum or minimum of two models, a ReLU,
`jnp.where(p > 0, p, 0)`) gives the number Python gives or a clear error, never a silent wrong
number (attack round 11c, finding 13: negative floats picked the wrong one of two)."""

import math
import pickle
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import eqxstable as es
from eqxstable._module import _dynamic


class Policy(es.StableModule):
    w: jax.Array
    scale: Any = es.field(dynamic=True)


# Each: the tree operation, and what Python computes for the field's numbers.
OPS = {
    "maximum": (lambda a, b: jax.tree.map(jnp.maximum, a, b), max),
    "minimum": (lambda a, b: jax.tree.map(jnp.minimum, a, b), min),
    "relu": (lambda a, b: jax.tree.map(lambda p: jnp.maximum(p, 0), a), lambda x, y: max(x, 0)),
    "where": (
        lambda a, b: jax.tree.map(lambda p: jnp.where(p > 0, p, 0), a),
        lambda x, y: x if x > 0 else 0,
    ),
    "mask": (lambda a, b: jax.tree.map(lambda p: p * (p > 0), a), lambda x, y: x * (x > 0)),
    "abs": (lambda a, b: jax.tree.map(jnp.abs, a), lambda x, y: abs(x)),
    "clip": (lambda a, b: jax.tree.map(lambda p: jnp.clip(p, -1, 1), a), lambda x, y: x),
    "select": (
        lambda a, b: jax.tree.map(lambda p, q: jnp.where(True, p, q), a, b),
        lambda x, y: x,
    ),
}

NUMBERS = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False).filter(lambda x: x == 0 or abs(x) > 1e-30),
    st.integers(-(2**31), 2**31 - 1),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(op=st.sampled_from(sorted(OPS)), x=NUMBERS, y=NUMBERS)
def test_leafwise_arithmetic_is_right_or_a_clear_error(op, x, y):
    if type(x) is not type(y):
        y = type(x)(y)
    tree_op, python = OPS[op]
    a, b = Policy(jnp.ones(2), x), Policy(jnp.ones(2), y)
    try:
        got = tree_op(a, b).scale
    except ValueError as e:
        assert "dynamic field" in str(e) and "Policy.scale" in str(e)
        return
    want = python(x, y)
    # Python's answer, with its type where it is one of the two numbers (a clip of a number in
    # range, the choice of a whole leaf).
    assert got == want or (isinstance(want, float) and math.isclose(got, want)), (op, x, y, got)
    if op in ("select", "clip"):
        assert type(got) is type(x)


def test_a_pickle_of_the_old_layout_reads_back():
    # Before the seal had two words: one checksum word, and `uint32` words for a float.
    words = _dynamic._words(-0.5, np.float32, np.float64)
    old = np.concatenate([words, np.array([_dynamic._checksum("float", words)], np.uint32)])
    h = pickle.loads(pickle.dumps(_dynamic.Hyper("float", jnp.asarray(old), "Policy.scale")))
    assert _dynamic.decode(h) == -0.5
    broken = old.copy()
    broken[0] += 1
    h = pickle.loads(pickle.dumps(_dynamic.Hyper("float", jnp.asarray(broken), "Policy.scale")))
    with pytest.raises(ValueError, match="Policy.scale"):
        _dynamic.decode(h)
