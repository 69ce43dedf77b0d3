"""A watched non-contiguous NumPy view (a column slice of a matrix, attack 12a-06) is compared
where it is, bit for bit, in blocks, never copied out with `tobytes()` on a hit; any byte written
after the first call is still seen (a retrace that matches eager)."""

import sys

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys._bytes import _COPIED, ArrayState, same_bytes


def _c_calls(check, name: str) -> int:
    # Counted, not timed: how often the C function `name` runs during `check()`.
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event == "c_call" and getattr(arg, "__name__", "") == name:
            calls += 1

    sys.setprofile(profile)
    try:
        check()
    finally:
        sys.setprofile(None)
    return calls


_BASE = np.arange(400 * 200, dtype=np.float64).reshape(400, 200)
VIEW = _BASE[:, ::2]
assert not VIEW.flags.c_contiguous and VIEW.nbytes > _COPIED


@pytest.mark.counts_traces
def test_a_hit_over_a_strided_view_copies_nothing_and_a_write_retraces():
    traces = 0

    @es.filter_jit
    def f(x):
        nonlocal traces
        traces += 1
        return x * VIEW[7, 3]

    x = jnp.ones(2)
    f(x)
    assert _c_calls(lambda: f(x), "tobytes") == 0
    assert traces == 1
    old = VIEW[7, 3]
    try:
        _BASE[7, 6] = -1.0  # Column 6 of the base is column 3 of the view.
        assert float(f(x)[0]) == -1.0 and traces == 2
        _BASE[7, 7] = 5.0  # Not part of the view: still a hit.
        assert float(f(x)[0]) == -1.0 and traces == 2
    finally:
        _BASE[7, 6] = old


_DTYPES = [np.float64, np.float32, np.complex128, np.int16, "S7", [("a", "<i4"), ("b", "<f8")]]


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(_DTYPES),
    rows=st.integers(1, 300),
    cols=st.integers(2, 300),
    step=st.integers(2, 4),
    where=st.integers(0, 10**9),
    byte=st.integers(0, 255),
    transpose=st.booleans(),
)
def test_the_strided_compare_is_the_bytes_compare(dtype, rows, cols, step, where, byte, transpose):
    base = np.zeros((rows, cols * step), dtype=dtype)
    view = base[:, ::step]
    if transpose:
        view = view.T
    state = ArrayState(view, view.tobytes())
    assert same_bytes(view, state)
    raw = base.reshape(-1).view(np.uint8)
    i = where % raw.size
    raw[i] = byte
    # Exactly as a comparison of the copied bytes: a byte outside the view changes nothing.
    assert same_bytes(view, state) == (view.tobytes() == state.data)


def test_negative_zero_and_nan_payloads_are_changes():
    base = np.zeros((300, 400))
    view = base[:, ::2]
    state = ArrayState(view, view.tobytes())
    base[3, 4] = -0.0
    assert not same_bytes(view, state)
    base[3, 4] = 0.0
    assert same_bytes(view, state)
    base[3, 4] = np.nan
    state = ArrayState(view, view.tobytes())
    base.view(np.uint64)[3, 4] ^= np.uint64(1)  # Another NaN (NumPy 1.25: not a Python int).
    assert not same_bytes(view, state)


def test_a_few_long_rows_are_compared_in_blocks():
    base = np.zeros((2, 1_200_002))
    view = base[:, ::2]
    state = ArrayState(view, view.tobytes())
    assert same_bytes(view, state)
    base[1, -2] = 1.0
    assert not same_bytes(view, state)
