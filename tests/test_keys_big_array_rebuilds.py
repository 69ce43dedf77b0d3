"""What a large NumPy array read by rebuilt functions costs (`K-array-reached`, attack 8a-20,
8b-09, 9a-08): one copy and one digest per array while a watch holds the copy (whatever the
number of readers and wrappers), one of each per new wrapper once the last one went (the copy
goes with it), and a hit compares the array in place, allocating nothing; any change to it is
still seen."""

import gc
import hashlib
import tracemalloc

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import _arrays, _bytes, compute
from eqxstable._keys._dtypes import dtype_key


DATA = np.arange(1 << 17, dtype=np.float64)  # 1 MiB: compared by `memcmp`


def _rebuilt():
    def loss(x):
        return x * DATA[0] + DATA[-1]

    return loss


class _Counting:
    """`hashlib` for `_arrays`, counting the digests made."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        real = getattr(hashlib, name)

        def counting(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        return counting


@pytest.fixture
def copies(monkeypatch):
    """`(digests, copies)`: how many times a large array was hashed and copied for a watch."""
    digests = _Counting()
    made = []
    real = _bytes.ArrayState

    def counting(array, data, shared=False):
        if shared:
            made.append(data)
        return real(array, data, shared)

    monkeypatch.setattr(_arrays, "hashlib", digests)
    monkeypatch.setattr(_arrays, "ArrayState", counting)
    es.clear_caches()
    gc.collect()
    yield lambda: (digests.calls, len(made))
    es.clear_caches()


def test_each_new_wrapper_copies_and_hashes_once(copies):
    # `es.filter_jit(loss)(x)` written inline, `loss` rebuilt each step: the last wrapper and its
    # copy are gone, so each new one copies and hashes once (the program's lookup and the
    # wrapper's own watch share that copy; it was twice).
    x = jnp.float32(2.0)
    for step in range(1, 5):
        assert float(es.filter_jit(_rebuilt())(x)) == DATA[-1]
        gc.collect()
        assert copies() == (step, step)


def test_live_wrappers_of_rebuilt_readers_share_one_copy(copies):
    x = jnp.float32(2.0)
    wrappers = [es.filter_jit(_rebuilt()) for _ in range(4)]
    for w in wrappers:
        assert float(w(x)) == DATA[-1]
    assert copies() == (1, 1)


def test_one_copy_held_and_freed_with_the_wrappers():
    es.clear_caches()
    gc.collect()
    a = np.arange(1 << 20, dtype=np.float64)  # 8 MiB

    def reader():
        return lambda x: x + a[1]

    x = jnp.float32(0.0)
    es.filter_jit(reader())(x)  # Compiles first: what XLA keeps is not counted below.
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        wrappers = [es.filter_jit(reader()) for _ in range(4)]
        assert all(float(w(x)) == 1.0 for w in wrappers)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        del wrappers
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # One copy for the four wrappers (it was one for each new wrapper's lookup, dropped, and
    # one for its watch), and none once they are gone.
    assert a.nbytes <= held < 1.5 * a.nbytes
    assert left < 0.1 * a.nbytes


@pytest.fixture(params=["memcmp", "numpy"])
def compare(request, monkeypatch):
    """Each way `same_bytes` compares a large array: `memcmp`, and NumPy in slices where the
    platform has no `memcmp`."""
    if request.param == "numpy":
        monkeypatch.setattr(_bytes, "_memcmp", None)
    elif _bytes._memcmp is None:
        pytest.skip("no memcmp on this platform")
    return request.param


@pytest.mark.counts_traces
@pytest.mark.parametrize("where", [0, 1, -1])
def test_a_change_after_a_hit_of_a_rebuilt_reader_retraces(compare, where):
    a = np.zeros(1 << 17, dtype=np.float32)
    traces = 0

    def rebuilt():
        def loss(x):
            nonlocal traces
            traces += 1
            return x + a.sum()

        return loss

    x = jnp.float32(1.0)
    w = es.filter_jit(rebuilt())
    assert float(w(x)) == 1.0
    # A rebuilt reader while the first wrapper holds the copy: a hit, checked in place.
    v = es.filter_jit(rebuilt())
    assert float(v(x)) == 1.0 and float(v(x)) == 1.0
    assert traces == 1
    a[where] = 3.0
    assert float(v(x)) == 4.0 == float(x + a.sum())
    assert traces == 2
    assert float(w(x)) == 4.0
    a[where] = 0.0
    assert float(v(x)) == 1.0


def test_a_hit_allocates_nothing():
    if _bytes._memcmp is None:
        pytest.skip("no memcmp on this platform")
    a = np.zeros(10_000_000)
    _, watch = compute(lambda: a)
    tracemalloc.start()
    try:
        assert watch.valid()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The slices NumPy compared allocated a boolean array of half a million items each.
    assert peak < 64 * 1024


_DTYPES = [np.uint8, np.int16, np.float32, np.float64, np.complex64]


@st.composite
def _arrays_and_changes(draw):
    dtype = draw(st.sampled_from(_DTYPES))
    n = draw(st.integers(0, 600))
    a = np.arange(n, dtype=dtype)
    view = draw(st.sampled_from(["whole", "strided", "transposed", "offset"]))
    if view == "strided":
        a = a[::2]
    elif view == "transposed" and n % 2 == 0 and n:
        a = a.reshape(2, -1).T
    elif view == "offset":
        a = a[1:]
    change = draw(st.sampled_from(["none", "byte", "same byte", "shape", "dtype"]))
    return a, change, draw(st.integers(0, 1 << 16)), draw(st.integers(0, 255))


@settings(max_examples=300, deadline=None)
@given(_arrays_and_changes(), st.sampled_from(["memcmp", "numpy", "copied"]))
def test_same_bytes_is_exactly_the_bytes_shape_and_dtype(case, path):
    a, change, where, byte = case
    old = _bytes.ArrayState(a, a.tobytes())
    shape, dtype = a.shape, dtype_key(a.dtype)
    raw = a.view(np.uint8) if a.flags.c_contiguous and a.ndim else None
    if change in ("byte", "same byte") and raw is not None and raw.size:
        i = where % raw.size
        raw.reshape(-1)[i] = raw.reshape(-1)[i] if change == "same byte" else byte
    elif change == "shape" and a.flags.c_contiguous and a.ndim:
        a.shape = (1, *a.shape)
    elif change == "dtype" and a.flags.c_contiguous and a.ndim and a.dtype.itemsize > 1:
        a.dtype = np.dtype(np.uint8)
    expected = a.shape == shape and dtype_key(a.dtype) == dtype and a.tobytes() == old.data
    saved = _bytes._memcmp, _bytes._COPIED
    try:
        if path == "numpy":
            _bytes._memcmp = None
        if path != "copied":
            # Every size through the path under test, not only beyond `_COPIED`.
            _bytes._COPIED = 0
        assert _bytes.same_bytes(a, old) == expected
    finally:
        _bytes._memcmp, _bytes._COPIED = saved


def _apply(g, x):
    return g(x)


@pytest.mark.counts_traces
def test_an_inline_wrapper_with_a_rebuilt_static_reader_reuses_the_copy(copies):
    # `es.filter_jit(_apply)(loss, x)` written inline, `loss` rebuilt each step: the program the
    # new wrapper calls keeps its entries' copy (it was weakened, and the copy dropped, just
    # before the new wrapper called it again), so the new reader's array is checked in place.
    traces = 0

    def rebuilt():
        def loss(x):
            nonlocal traces
            traces += 1
            return x * DATA[0] + DATA[-1]

        return loss

    x = jnp.float32(2.0)
    for _ in range(4):
        assert float(es.filter_jit(_apply)(rebuilt(), x)) == DATA[-1]
        gc.collect()
    assert copies() == (1, 1)
    assert traces == 1
    DATA[-1] += 1.0
    try:
        assert float(es.filter_jit(_apply)(rebuilt(), x)) == DATA[-1]
        assert traces == 2
    finally:
        DATA[-1] -= 1.0
