"""Property tests for the canonical form of a `StableModule`'s static field (`_static.py`).

For generated nested values (numbers of several types, `-0.0`, NaNs, strings, lists, tuples, dicts,
sets, NumPy arrays and scalars): two values get the very same canonical object exactly when they
are type-exactly equal (same types all the way down, floats by bits, arrays by dtype, shape and
bytes), and the value reads back equal to the one assigned, with the same types.
"""

import copy
import struct
from typing import Any

import numpy as np
from hypothesis import given, strategies as st

import eqxstable as es
from eqxstable._module._readonly import ReadOnlyDict, ReadOnlyList, ReadOnlySet
from eqxstable._module._static import freeze_static, Static


def reference(value: Any) -> Any:
    """An independent statement of type-exact equality, written plainly."""
    t = type(value)
    if t is float:
        return ("float", struct.pack(">d", value))
    if t is np.ndarray:
        return ("ndarray", str(value.dtype), value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return ("numpy", t.__name__, value.tobytes())
    if t in (list, tuple):
        return (t.__name__, tuple(reference(v) for v in value))
    if t is dict:
        return ("dict", tuple((reference(k), reference(v)) for k, v in value.items()))
    if t in (set, frozenset):
        # In iteration order, which depends on how the set was built: code can loop over it.
        return (t.__name__, tuple(reference(v) for v in value))
    return (t.__name__, value)


def read_back_type(t: type) -> type:
    return {dict: ReadOnlyDict, list: ReadOnlyList, set: ReadOnlySet}.get(t, t)


def same_as_assigned(assigned: Any, read: Any) -> bool:
    t = type(assigned)
    if t is frozenset:
        # The frozenset itself, or (where `pickle` would lay its items out in another order) a
        # subclass that iterates as it did.
        order = list(map(reference, assigned))
        return isinstance(read, frozenset) and order == list(map(reference, read))
    if type(read) is not read_back_type(t):
        return False
    if t in (list, tuple):
        return len(assigned) == len(read) and all(map(same_as_assigned, assigned, read))
    if t is dict:
        return list(assigned) == list(read) and all(
            same_as_assigned(v, read[k]) for k, v in assigned.items()
        )
    if t is set:
        return assigned == read and list(assigned) == list(read)
    return reference(assigned) == reference(read)


scalars = st.one_of(
    st.integers(-3, 3),
    st.booleans(),
    st.sampled_from([0.0, -0.0, 1.0, 1, True, 0, False, float("nan"), 2**70]),
    st.floats(width=32),
    st.builds(np.int32, st.integers(-2, 2)),
    st.builds(np.float32, st.sampled_from([0.0, -0.0, 1.0])),
    st.builds(np.float64, st.sampled_from([0.0, 1.0])),
    st.text(max_size=2),
    st.none(),
)
arrays = st.builds(
    lambda values, dtype: np.array(values, dtype=dtype),
    st.lists(st.integers(0, 2), max_size=3),
    st.sampled_from([np.int32, np.int64, np.float32, np.uint8]),
)
values = st.recursive(
    st.one_of(scalars, arrays),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from(["a", "b", 1]), inner, max_size=2),
        st.sets(st.integers(-2, 2), max_size=3),
        st.lists(st.integers(-9, 9), max_size=4).map(set),  # Colliding hashes: orders vary.
        st.frozensets(st.integers(-9, 9), max_size=3),
    ),
    max_leaves=6,
)


def canonical(value: Any) -> Any:
    return freeze_static(value, lambda x, _: es.intern(x))


@given(values, values)
def test_same_canonical_object_exactly_when_type_exactly_equal(a, b):
    same = canonical(a) is canonical(b)
    assert same == (reference(a) == reference(b))


@given(values)
def test_reads_back_as_assigned_and_copies_are_canonical(value):
    frozen = canonical(value)
    read = frozen.value if type(frozen) is Static else frozen
    assert same_as_assigned(value, read)
    # A copy of a set can iterate in another order (Python lays its items out afresh): it is
    # the same canonical object exactly when it reads the same.
    clone = copy.deepcopy(value)
    assert (canonical(clone) is frozen) == (reference(clone) == reference(value))
    assert copy.deepcopy(frozen) is frozen
