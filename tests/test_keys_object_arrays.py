"""A NumPy array of dtype `object` holds pointers: its bytes are never its key (attack 6, finding
11). It is itself and its items keyed as what they are (a list by identity and contents, a user
object by its attributes), watched; an array of a structured dtype with an object field makes its
reader identity-keyed. Keying one never crashes, and `intern` never substitutes one."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


class _Box:
    def __init__(self, v: float):
        self.v = v


def _holding(*items: object) -> np.ndarray:
    a = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        a[i] = item
    return a


_scales = st.lists(st.floats(-4, 4, allow_nan=False, width=32), min_size=1, max_size=4)


def _list_readers(table: np.ndarray):
    """Makes new functions reading `table[0][0]`, and counts their traces. Made here, not in the
    test: the keys find a counter cell's enclosing function by its qualified name, which a
    `@given` test's is not."""
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * table[0][0]

        return f

    return make, lambda: traces


@pytest.mark.counts_traces
@settings(max_examples=15, deadline=None)
@given(scales=_scales)
def test_an_object_array_holding_a_list_is_keyed_by_the_list(scales):
    table = _holding([scales[0]])
    make, traces = _list_readers(table)
    x = jnp.ones(2)
    same = es.filter_jit(make())
    for s in scales:
        table[0][0] = s
        expected = np.asarray(eqx.filter_jit(make())(x))
        assert np.array_equal(np.asarray(es.filter_jit(make())(x)), expected)
        assert np.array_equal(np.asarray(same(x)), expected)
    # Equinox traces each rebuilt function; eqxstable once per scale (by its bits: -0.0 is its own).
    assert traces() == len(scales) + len({np.float64(s).tobytes() for s in scales})


@pytest.mark.counts_traces
def test_an_object_held_by_an_object_array_is_watched():
    box = _Box(1.0)
    table = _holding(box)
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * table.flat[0].v * table.ndim

        return f

    x = jnp.ones(2)
    same = es.filter_jit(make())
    assert float(same(x)[0]) == 1.0
    assert float(es.filter_jit(make())(x)[0]) == 1.0
    assert traces == 1
    box.v = 4.0
    assert float(es.filter_jit(make())(x)[0]) == 4.0
    assert float(same(x)[0]) == 4.0
    table[0] = box  # The same object put back: a hit.
    assert float(same(x)[0]) == 4.0
    assert traces == 2
    table[0] = _Box(4.0)  # Another object (a user object is itself): another key.
    assert float(same(x)[0]) == 4.0
    table.shape = (1, 1)  # The same items in another shape: another key.
    assert float(same(x)[0]) == 8.0
    assert traces == 4


def test_object_arrays_are_never_substituted_and_never_crash():
    a, b = _holding([1.0], 2), _holding([1.0], 2)
    assert es.intern(a) is a and es.intern(b) is b
    assert es.stable_key(a) == es.stable_key(a) != es.stable_key(b)
    cyclic = _holding(None)
    cyclic[0] = cyclic
    assert es.stable_key(cyclic) == es.stable_key(cyclic)

    class Static(es.StableModule):
        table: np.ndarray = eqx.field(static=True)

    m1, m2 = Static(a), Static(b)
    assert m1.table is not m2.table and m1.table[0] == a[0] and m2.table[0] == b[0]
    # Each module froze its own copy of the items: a later change to the user's list is not its,
    # and the module that was given that list says so when read (attack 10a-10), the other not.
    a[0].append(9.0)
    with pytest.raises(TypeError, match=r"`Static.table.flat\[0\]`.*changed in place"):
        m1.table
    assert list(m2.table[0]) == [1.0]


@pytest.mark.counts_traces
def test_a_structured_array_with_an_object_field_makes_its_reader_identity_keyed():
    records = np.array([(1.0, [2.0])], dtype=[("f", "f8"), ("o", "O")])
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * records["o"][0][0]

        return f

    x = jnp.ones(2)
    same = es.filter_jit(make())
    assert float(same(x)[0]) == float(same(x)[0]) == 2.0
    assert traces == 1  # The same reader hits.
    records["o"][0][0] = 3.0
    assert float(es.filter_jit(make())(x)[0]) == 3.0  # A rebuilt one traces, as in Equinox.
    assert traces == 2
    assert es.stable_key(make()) != es.stable_key(make())
    assert es.intern(records) is records
