"""Property tests: for generated nested values, keys are equal exactly when the values are
type-exactly equal (same types all the way down, floats by bits)."""

import struct
from typing import Any

import numpy as np
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import eqxstable as es


def reference(value: Any) -> Any:
    """An independent statement of type-exact equality, written plainly."""
    t = type(value)
    if t is float:
        return ("float", struct.pack(">d", value))
    if t is complex:
        return ("complex", struct.pack(">dd", value.real, value.imag))
    if isinstance(value, np.generic):
        return ("numpy", t.__name__, value.tobytes())
    if t is tuple:
        return ("tuple", tuple(reference(v) for v in value))
    if t is frozenset:
        # Iteration order is behaviour: equal frozensets may iterate differently.
        return ("frozenset", tuple(reference(v) for v in value))
    return (t.__name__, value)


scalars = st.one_of(
    st.integers(-3, 3),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([0.0, -0.0, 1.0, 1, True, 0, False, float("nan")]),
    st.complex_numbers(max_magnitude=2, allow_nan=False),
    st.builds(np.int32, st.integers(-2, 2)),
    st.builds(np.float32, st.sampled_from([0.0, -0.0, 1.0])),
    st.text(max_size=2),
    st.binary(max_size=2),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.tuples(inner, inner),
        st.lists(inner, max_size=3).map(tuple),
        st.frozensets(
            st.one_of(st.integers(-2, 2), st.booleans(), st.text(max_size=1)), max_size=3
        ),
    ),
    max_leaves=8,
)


@given(values, values, st.booleans())
def test_keys_equal_exactly_when_type_exactly_equal(a, b, rebuilt):
    if rebuilt:
        b = rebuild(a)
    assert (es.stable_key(a) == es.stable_key(b)) == (reference(a) == reference(b))


def rebuild(value: Any) -> Any:
    """An equal value built afresh from its parts: a distinct object wherever CPython does not
    share one (small ints, one-character strings, the empty tuple), unlike `copy.deepcopy`, which
    returns immutable values themselves."""
    t = type(value)
    if t is float:
        return struct.unpack("<d", struct.pack("<d", value))[0]
    if t is complex:
        return complex(rebuild(value.real), rebuild(value.imag))
    if t is int:
        return int(str(value))
    if t is str or t is bytes:
        return value[:1] + value[1:]
    if isinstance(value, np.generic):
        return np.frombuffer(bytearray(value.tobytes()), dtype=value.dtype)[0]
    if t is tuple or t is frozenset:
        return t([rebuild(v) for v in value])
    return value


def distinct(value: Any) -> bool:
    """Whether `rebuild` must have made a new object for `value`."""
    t = type(value)
    return t in (float, complex) or (t in (tuple, frozenset) and len(value) > 0)


@given(values)
def test_rebuilt_values_share_key_and_canonical(a):
    b = rebuild(a)
    assert not distinct(a) or b is not a
    if reference(b) == reference(a):  # A rebuilt frozenset may iterate in another order.
        assert es.stable_key(a) == es.stable_key(b)
        assert hash(es.stable_key(a)) == hash(es.stable_key(b))
        if _holds_nan(a):
            # Unequal to every other NaN object: never substituted (`test_registry_nan.py`).
            assert es.intern(a) is a and es.intern(b) is b
        else:
            assert es.intern(a) is es.intern(b)


def _holds_nan(x) -> bool:
    if isinstance(x, (float, complex, np.floating, np.complexfloating)):
        return x != x
    if isinstance(x, dict):
        return any(map(_holds_nan, x)) or any(map(_holds_nan, x.values()))
    if isinstance(x, (list, tuple, set, frozenset)):
        return any(map(_holds_nan, x))
    return False


def closure_over(value):
    return lambda x: (x, value)


@given(values, values, st.booleans())
def test_closures_equivalent_exactly_when_captured_values_are(a, b, rebuilt):
    # Often `b` is `a` rebuilt: equal values, distinct objects.
    if rebuilt:
        b = rebuild(a)
    same = reference(a) == reference(b)
    assert (es.stable_key(closure_over(a)) == es.stable_key(closure_over(b))) == same
    # A closure holding a NaN is never substituted (`test_registry_nan.py`).
    shared = same and not _holds_nan(a)
    assert (es.intern(closure_over(a)) is es.intern(closure_over(b))) == shared


arrays = hnp.arrays(
    dtype=st.sampled_from([np.float32, np.float64, np.int32, np.bool_]),
    shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3),
)


@given(arrays, arrays)
def test_numpy_arrays_keyed_by_dtype_shape_and_bytes(a, b):
    same = (a.dtype.str, a.shape, a.tobytes()) == (b.dtype.str, b.shape, b.tobytes())
    assert (es.stable_key(a) == es.stable_key(b)) == same
    assert es.stable_key(a) == es.stable_key(a.copy())
    assert es.stable_key(a) != es.stable_key(a.reshape((1,) + a.shape))
