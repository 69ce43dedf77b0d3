"""What keying holds, and for how long (attack 8a-15, 8b-15).

A function whose globals are a namespace of its own (code made with `exec`: sympy's `lambdify`, a
templated kernel) is freed once dropped, after `stable_key`, `intern` and `filter_jit` alike: no
key or memo entry holds its namespace, which holds it (`_keys/_handles.py`). A later namespace
that reuses a dead one's `id()` is never taken for it. The copy of a large NumPy array that a
reader's watch compares against lives as long as the strong watches that check it (a wrapper's,
a cache entry's), not as long as the array or its reader (`_bytes.ArrayState`)."""

import dataclasses
import gc
import weakref

import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es
from eqxstable._jit._lru import sizes
from eqxstable._keys import _arrays, compute


def _generated(i: int, scale: float = 2.0):
    """`def f(x): return x * SCALE + TABLE[0]`, made by `exec` in a namespace of its own, which
    holds `f`: a cycle only the garbage collector frees."""
    ns = {"SCALE": scale, "TABLE": np.full(10, float(i))}
    exec("def f(x):\n    return x * SCALE + TABLE[0]\n", ns)
    return ns["f"]


def _alive(refs: list) -> int:
    gc.collect()
    return sum(r() is not None for r in refs)


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()
    yield
    es.clear_caches()


@pytest.mark.parametrize("keyed_by", ["stable_key", "intern", "compute"])
def test_a_generated_function_is_freed_once_dropped(keyed_by):
    refs = []
    for i in range(20):
        f = _generated(i)
        if keyed_by == "stable_key":
            es.stable_key(f)
            es.stable_key(f)  # A memo hit: its entry holds the key and the weak watch.
        elif keyed_by == "intern":
            assert es.intern(f) is f
        else:
            compute(f)
        refs.append(weakref.ref(f))
        del f
    assert _alive(refs) == 0


def test_a_jitted_generated_function_goes_with_its_program():
    saved = dataclasses.replace(sizes)
    sizes.released = 2
    try:
        refs = []
        for i in range(12):
            f = _generated(i)
            w = es.filter_jit(f)
            assert float(w(jnp.float32(1.0))) == 2.0 + i
            refs.append(weakref.ref(f))
            del f, w
            gc.collect()
        # The released programs beyond `sizes.released` are dropped at the next program made.
        es.filter_jit(lambda x: x)(jnp.float32(0.0))
        assert _alive(refs) <= 3
    finally:
        sizes.released = saved.released


def test_the_memo_still_serves_a_live_generated_function():
    f = _generated(0)
    a = es.stable_key(f)
    gc.collect()
    assert es.stable_key(f) is a
    f.__globals__["SCALE"] = 3.0
    assert es.stable_key(f) != a
    f.__globals__["SCALE"] = 2.0
    assert es.stable_key(f) == a


def test_a_rebuilt_lambda_in_code_run_with_exec_keeps_its_key():
    """Code run with `exec` in a dict of its own (a docstring example, a notebook tool): the
    lambda `make(2.0)` returns dies before the next is made, and `make`, which lives in that dict,
    keeps the dict's handle alive, so the rebuilt lambda has the same key."""
    namespace: dict = {}
    exec("def make(scale):\n    return lambda x: x * scale\n", namespace)
    make = namespace["make"]
    first = es.stable_key(make(2.0))
    gc.collect()
    assert es.stable_key(make(2.0)) == first
    assert es.stable_key(make(2)) != first


def test_a_reused_id_is_never_an_old_namespace():
    """Same code, equal globals: the keys differ only by the namespace, which is identity. Each
    namespace dies before the next is made, so CPython reuses its memory (and `id()`); the old
    keys are kept alive, and none may equal a later one."""
    keys, ids = [], []
    for _ in range(40):
        f = _generated(0)
        keys.append(es.stable_key(f))
        ids.append(id(f.__globals__))
        del f
        gc.collect()
    assert len(set(ids)) < len(ids), "no id was reused: the test shows nothing"
    assert len(set(keys)) == len(keys)
    namespaces = [k.parts.namespace for k in keys]
    assert all(a != b for i, a in enumerate(namespaces) for b in namespaces[i + 1 :])


def test_reused_ids_under_jit_agree_with_eager():
    """Differential: generated functions in namespaces that reuse dead ones' ids, jitted while
    the older programs (and their keys) are kept, then their namespace rebound: every call
    equals the eager call."""
    x = jnp.arange(3.0)
    for i in range(16):
        f = _generated(i % 2, scale=float(i % 3))
        w = es.filter_jit(f)
        assert np.array_equal(w(x), f(x))
        f.__globals__["SCALE"] = float(i)
        assert np.array_equal(w(x), f(x))
        del f, w
        gc.collect()


# A large array read as a global: its key holds a digest, its watch one copy of its bytes.
BIG = np.arange(64 * 1024, dtype=np.float64)  # 512 KiB


def _reads_big(x):
    return x + BIG[:4].sum()


def _shared_state():
    ref, state, _ = _arrays._big[id(BIG)]
    assert ref() is BIG
    return state


def test_the_copy_goes_with_the_wrapper():
    w = es.filter_jit(_reads_big)
    assert float(w(jnp.float32(0.0))) == 6.0
    state = _shared_state()
    assert state() is not None
    # A hit keeps using the same copy, checked in place.
    w(jnp.float32(0.0))
    assert _shared_state()() is state()
    del w
    gc.collect()
    # Nothing of eqxstable holds it now: not the memo entry of the still-live `_reads_big`, not
    # the table of shared copies, not the program kept for a later wrapper (its key holds the
    # digest).
    assert state() is None
    # A new wrapper copies and watches afresh, and still sees a change.
    w = es.filter_jit(_reads_big)
    assert float(w(jnp.float32(0.0))) == 6.0
    BIG[0] = 100.0
    try:
        assert float(w(jnp.float32(0.0))) == 106.0
    finally:
        BIG[0] = 0.0


def test_the_copy_goes_with_the_last_watch_that_holds_it():
    key, watch = compute(_reads_big)
    state = _shared_state()
    other_key, other_watch = compute(lambda x: x + BIG[:4].sum())
    # One copy for both readers while a watch holds it.
    assert _shared_state()() is state()
    del watch
    gc.collect()
    assert state() is not None
    del other_watch
    gc.collect()
    assert state() is None
    # The memo's entry (a weak watch) no longer serves: the key is made again, equal.
    assert es.stable_key(_reads_big) == key


def _apply(g, x):
    return g(x)


@pytest.mark.counts_traces
def test_a_static_reader_s_copy_goes_with_the_wrapper_not_its_kept_program():
    """A function passed as a static argument: the cache entry watches the array while a wrapper
    calls its program; the program kept for a later wrapper (`_sharing._released`) watches it
    weakly, and its entry checks the function again (an equal key: a hit) when called anew."""
    traces = 0

    def reader(x):
        nonlocal traces
        traces += 1
        return x + BIG[:4].sum()

    w = es.filter_jit(_apply)
    assert float(w(reader, jnp.float32(0.0))) == 6.0
    state = _shared_state()
    assert state() is not None
    del w
    gc.collect()
    es.filter_jit(lambda x: x)(jnp.float32(0.0))  # Released programs are looked at here.
    gc.collect()
    assert state() is None
    w = es.filter_jit(_apply)
    assert float(w(reader, jnp.float32(0.0))) == 6.0
    assert traces == 1
    BIG[0] = 100.0
    try:
        assert float(w(reader, jnp.float32(0.0))) == 106.0
        assert traces == 2
    finally:
        BIG[0] = 0.0
