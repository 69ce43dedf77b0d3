"""A NumPy array's memory layout is part of it (`eqxstable/_keys/_layout.py`): code reads it
(`np.ravel(a, order="K")`, `a.flags`, `a.strides`, `np.frombuffer(a)`), so `W.T` and its
C-ordered copy are two keys, and the read-only copy that `es.intern`, a `StableModule` and
`es.stabilize` hand out is laid out as the array given (C or Fortran order, a strided view's
very strides, unaligned where it was). Attack round 13a, finding 05 (`W.T` read back
C-ordered: a module computed `[0, 2, 4, 1, 3, 5]` where the plain one computed `[0, ..., 5]`)."""

import copy
import warnings
from typing import Any

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import eqxstable as es
from eqxstable._keys._layout import layout


pytestmark = [
    pytest.mark.filterwarnings("ignore:A JAX array is being set as static"),
    pytest.mark.filterwarnings("ignore:Setting the .* on a NumPy array:DeprecationWarning"),
]

DTYPES = [np.float64, np.float32, np.int8, np.int16, np.complex64, np.bool_, np.uint32]


def _view(base: np.ndarray, how: str, axis: int, step: int) -> np.ndarray:
    # The ways a static table gets a layout of its own.
    if how == "C":
        return base
    if how == "F":
        return np.asfortranarray(base)
    if how == "T":
        return base.T
    if how == "step":
        index = [slice(None)] * base.ndim
        index[axis % base.ndim] = slice(None, None, step)
        return base[tuple(index)]
    if how == "broadcast":
        return np.broadcast_to(base, (2, *base.shape))
    # Unaligned: the same items one byte past an aligned address.
    raw = bytearray(base.nbytes + 1)
    out = np.ndarray(base.shape, base.dtype, buffer=raw, offset=1)
    out[...] = base
    return out


@st.composite
def arrays(draw: Any) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    n = int(np.prod(shape))
    data = draw(st.binary(min_size=n * dtype.itemsize, max_size=n * dtype.itemsize))
    base = np.frombuffer(data, np.uint8).view(dtype).reshape(shape).copy()
    how = draw(st.sampled_from(["C", "F", "T", "step", "broadcast", "unaligned"]))
    return _view(base, how, draw(st.integers(0, 2)), draw(st.sampled_from([2, -1, -2])))


def _same_layout(got: np.ndarray, want: np.ndarray) -> None:
    assert layout(got) == layout(want)
    assert got.flags.c_contiguous == want.flags.c_contiguous
    assert got.flags.f_contiguous == want.flags.f_contiguous
    assert got.flags.aligned == want.flags.aligned
    if not (want.flags.c_contiguous or want.flags.f_contiguous):
        assert got.strides == want.strides
    # Bit for bit, in memory order and in C order.
    assert np.ravel(got, order="K").tobytes() == np.ravel(want, order="K").tobytes()
    assert got.flatten("A").tobytes() == want.flatten("A").tobytes()
    assert got.tobytes() == want.tobytes()
    assert got.dtype == want.dtype and got.shape == want.shape


class Stable(es.StableModule):
    table: Any = eqx.field(static=True)


class Plain(eqx.Module):
    table: Any = eqx.field(static=True)


@settings(max_examples=150)
@given(arrays())
def test_intern_keeps_the_layout(a):
    got = es.intern(a)
    _same_layout(got, a)
    assert not got.flags.writeable


@settings(max_examples=80)
@given(arrays())
def test_static_fields_read_back_laid_out_as_given(a):
    _same_layout(Stable(a).table, a)
    plain = Plain(a)
    _same_layout(es.stabilize(plain).table, plain.table)


@settings(max_examples=150)
@given(arrays())
def test_keys_split_where_layouts_differ(a):
    c = np.ascontiguousarray(a)
    # Told apart by NumPy's own flags, not by `layout`.
    same = a.flags.c_contiguous and a.flags.aligned == c.flags.aligned
    assert (es.stable_key(a) == es.stable_key(c)) == same
    assert (Stable(a) == Stable(c)) == same


def test_the_attack_transpose_computes_as_the_plain_module():
    table = np.arange(6.0).reshape(3, 2).T

    def use(self, v):
        return v * jnp.asarray(np.ravel(self.table, order="K"))

    class P(eqx.Module):
        table: np.ndarray = eqx.field(static=True)
        __call__ = use

    class S(es.StableModule):
        table: np.ndarray = eqx.field(static=True)
        __call__ = use

    x = jnp.ones(6)
    want = np.asarray(P(table)(x))
    assert want.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert np.asarray(S(table)(x)).tolist() == want.tolist()
    assert np.asarray(es.stabilize(P(table))(x)).tolist() == want.tolist()
    assert np.asarray(es.filter_jit(S.__call__)(S(table), x)).tolist() == want.tolist()
    # A C-ordered equal table is another program's input: keyed apart, traced apart.
    c = np.ascontiguousarray(table)
    assert np.asarray(S(c)(x)).tolist() == [0.0, 2.0, 4.0, 1.0, 3.0, 5.0]
    assert np.asarray(es.filter_jit(S.__call__)(S(c), x)).tolist() == [0, 2, 4, 1, 3, 5]


def test_copies_of_a_canonical_array_keep_memory_order():
    table = np.arange(6.0).reshape(3, 2).T
    held = es.stabilize(Plain(table)).table
    for made in (copy.copy(held), copy.deepcopy(held)):
        assert type(made) is np.ndarray and made.flags.writeable
        assert made.flags.f_contiguous == copy.copy(table).flags.f_contiguous


@pytest.mark.counts_traces
def test_a_reached_arrays_strides_assigned_in_place_trace_again():
    # A symmetric matrix whose strides are swapped keeps its C-order bytes, and reads back
    # transposed in memory: the watch compares the strides too.
    m = np.array([[1.0, 2.0], [2.0, 3.0]])
    traces = 0

    @es.filter_jit
    def f(x):
        nonlocal traces
        traces += 1
        return x * jnp.asarray(np.ravel(m, order="K"))

    x = jnp.ones(4)
    assert np.asarray(f(x)).tolist() == [1.0, 2.0, 2.0, 3.0]
    assert np.asarray(f(x)).tolist() == [1.0, 2.0, 2.0, 3.0] and traces == 1
    before = m.tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        m.strides = (8, 16)
    assert m.tobytes() == before and m.flags.f_contiguous
    assert np.asarray(f(x)).tolist() == [1.0, 2.0, 2.0, 3.0]
    assert traces == 2
    assert np.asarray(f(x)).tolist() == [1.0, 2.0, 2.0, 3.0] and traces == 2


def test_a_given_arrays_strides_assigned_since_raise():
    # The module cannot follow the user's array: reading it back says so.
    m = np.array([[1.0, 2.0], [2.0, 3.0]])
    s = Stable(m)
    assert s.table.flags.c_contiguous
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        m.strides = (8, 16)
    with pytest.raises(TypeError, match="strides"):
        _ = s.table


@pytest.mark.counts_traces
def test_a_jit_of_a_layout_reading_function_is_keyed_apart():
    # Under jit a static field's layout is read at trace time: two layouts, two traces.
    traces = 0

    @es.filter_jit
    def f(s, x):
        nonlocal traces
        traces += 1
        return x * jnp.asarray(np.ravel(s.table, order="K"))

    w = np.arange(6.0).reshape(3, 2)
    x = jnp.ones(6)
    a = f(Stable(w.T), x)
    b = f(Stable(np.ascontiguousarray(w.T)), x)
    assert traces == 2
    assert np.asarray(a).tolist() == [0, 1, 2, 3, 4, 5]
    assert np.asarray(b).tolist() == [0, 2, 4, 1, 3, 5]
    f(Stable(np.asfortranarray(w.T.copy())), x)
    assert traces == 2
    assert isinstance(jax.device_get(a), np.ndarray)


@pytest.mark.parametrize("how", ["C", "T", "reversed", "broadcast"])
def test_object_arrays_read_back_laid_out_as_given(how):
    o = np.array([[1, "a", [1]], [2, "b", (3,)]], dtype=object)
    a = {"C": o, "T": o.T, "reversed": o[:, ::-2], "broadcast": np.broadcast_to(o[0], (2, 3))}[how]
    for got in (Stable(a).table, es.stabilize(Plain(a)).table):
        assert got.strides == a.strides and not got.flags.writeable
        assert got.flags.c_contiguous == a.flags.c_contiguous
        assert got.flags.f_contiguous == a.flags.f_contiguous
        assert [str(x) for x in np.ravel(got, order="K")] == [
            str(x) for x in np.ravel(a, order="K")
        ]
