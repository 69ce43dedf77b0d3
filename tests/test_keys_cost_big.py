"""What a hit costs over a big structure (attack round 5, findings 06, 09, 14): a watch of a
container with more than 256 items must hold while nothing changed (CPython caches only small
ints, so a length compared with `is` never matched again), and the fast paths over containers of
exact scalars must give the slow path's answer exactly."""

import struct
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import _mutable, _scalars, _values, clear, compute, too_many_objects
from eqxstable._keys._context import frozen_scalars, MAX_OBJECTS

from .helpers import started_walks


class _Record:
    def __init__(self, v: int):
        self.v = v
        self.w = [v, v + 1]


@pytest.mark.parametrize(
    "make",
    [
        lambda: [0] * 1000,
        lambda: list(range(1000)),
        lambda: {f"k{i}": i for i in range(1000)},
        lambda: [_Record(i) for i in range(300)],
        lambda: {i for i in range(1000)},
    ],
    ids=["list", "distinct-ints", "dict", "objects", "set"],
)
def test_watch_of_a_big_container_holds_until_it_changes(make):
    big = make()
    f = lambda: big  # noqa: E731
    _, watch = compute(f)
    assert watch.valid()
    assert watch.valid()
    if isinstance(big, list):
        big.append(1)
    elif isinstance(big, dict):
        big["new"] = 1
    else:
        big.add(-1)
    assert not watch.valid()


@pytest.mark.counts_traces
def test_a_hit_over_a_big_list_does_not_rekey(monkeypatch):
    big = [0] * 200_000
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x + big[0]

    # Keying the list passes its items to `_scalars.scalar_run` (a run of one scalar type).
    runs = 0
    real = _mutable.scalar_run

    def counting(items: Any, ctx: Any) -> Any:
        nonlocal runs
        runs += len(items) == len(big)
        return real(items, ctx)

    monkeypatch.setattr(_mutable, "scalar_run", counting)
    g = es.filter_jit(f)
    g(jnp.float32(1.0))
    assert runs >= 1
    runs = 0
    for _ in range(5):
        g(jnp.float32(1.0))
    # Before: each hit re-keyed the 200k items (about 0.4 s each).
    assert runs == 0
    big[0] = 2
    assert float(g(jnp.float32(1.0))) == 3.0
    assert traces == 2


class _Str(str):
    pass


class _Int(int):
    pass


def _nan(payload: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0]


# Items that are equal under `==` yet key differently: `1`, `1.0`, `True`, `_Int(1)`; `0.0`,
# `-0.0`; NaNs with two payloads; `"a"` and `_Str("a")`; `b"a"`, `None`.
_ITEMS = st.sampled_from(
    [0, 1, 2, 1.0, 0.0, -0.0, _nan(1), _nan(2), True, False, _Int(1), "a", "b", _Str("a")]
    + [b"a", b"b", None, 10**30, 2.5]
)
_RUNS = st.one_of(
    st.lists(st.sampled_from([0, 1, 2, 10**30]), min_size=6, max_size=20),
    st.lists(st.sampled_from([0.0, -0.0, _nan(1), _nan(2)]), min_size=6, max_size=20),
    st.lists(st.sampled_from(["a", "b", ""]), min_size=6, max_size=20),
    st.lists(st.sampled_from([True, False]), min_size=6, max_size=20),
    st.lists(_ITEMS, max_size=20),
)


def _twins(x: Any) -> list:
    # Items `==` to `x` (or, for a NaN, with the same repr) that key differently.
    if type(x) is float:
        return [-x, _nan(2) if x is _nan(1) else _nan(1)] if x == 0 or x != x else [-x]
    if type(x) is int:
        return [float(x), bool(x) if x in (0, 1) else x + 1, _Int(x)]
    if type(x) is str:
        return [_Str(x), x.encode()]
    return [None, 0]


def _mutated(items: list, data: st.DataObject) -> list:
    # Often the same run with one item swapped for a `==`-equal one of another kind.
    out = list(items)
    how = data.draw(st.sampled_from(["same", "twin", "any"]))
    if out and how != "same":
        i = data.draw(st.integers(0, len(out) - 1))
        out[i] = data.draw(st.sampled_from(_twins(out[i])) if how == "twin" else _ITEMS)
    return out


def _keys_both_ways(obj_a: Any, obj_b: Any, part: Any) -> tuple[bool, bool]:
    answers = []
    for enabled in (True, False):
        _scalars.ENABLED = enabled
        try:
            clear()
            answers.append(part(compute(obj_a)[0]) == part(compute(obj_b)[0]))
        finally:
            _scalars.ENABLED = True
            clear()
    return answers[0], answers[1]


@settings(max_examples=300, deadline=None)
@given(_RUNS, st.data())
def test_scalar_runs_key_as_the_slow_path_does(items, data):
    other = _mutated(items, data)
    whole = lambda k: k  # noqa: E731
    contents = lambda k: k.parts.contents  # noqa: E731 (a list's contents, not its identity)
    fast, slow = _keys_both_ways(tuple(items), tuple(other), whole)
    assert fast == slow
    fast, slow = _keys_both_ways(items, other, contents)
    assert fast == slow
    # As a dict's keys (where they stay distinct) and as its values.
    if len(set(map(_canonical, items))) == len(items) and len(set(map(_canonical, other))) == len(
        other
    ):
        fast, slow = _keys_both_ways(dict.fromkeys(items, 0), dict.fromkeys(other, 0), contents)
        assert fast == slow
    a = {i: x for i, x in enumerate(items)}
    b = {i: x for i, x in enumerate(other)}
    fast, slow = _keys_both_ways(a, b, contents)
    assert fast == slow


def _canonical(x: Any) -> Any:
    return (type(x), struct.pack("<d", x) if type(x) is float else x)


@pytest.mark.parametrize(
    "a, b",
    [
        ([1] * 10, [1] * 9 + [True]),
        ([1] * 10, [1] * 9 + [1.0]),
        ([1] * 10, [1] * 9 + [_Int(1)]),
        ([0.0] * 10, [0.0] * 9 + [-0.0]),
        ([_nan(1)] * 10, [_nan(1)] * 9 + [_nan(2)]),
        (["a"] * 10, ["a"] * 9 + [_Str("a")]),
        ([True] * 10, [1] * 10),
        ([1.0] * 10, [1] * 10),
        ([b"a"] * 10, ["a"] * 10),
    ],
)
def test_scalar_runs_keep_equal_but_different_items_apart(a, b):
    # The fast path made lenient (the items' own `==`, a run of mixed types) fails here.
    assert len(a) >= _scalars.MIN_ITEMS
    assert es.stable_key(tuple(a)) != es.stable_key(tuple(b))
    assert compute(a)[0].parts.contents != compute(b)[0].parts.contents
    assert es.stable_key(tuple(a)) == es.stable_key(tuple(list(a)))
    assert compute(a)[0].parts.contents == compute(list(a))[0].parts.contents
    d = compute(dict(enumerate(a)))[0].parts.contents
    assert d != compute(dict(enumerate(b)))[0].parts.contents


@pytest.mark.parametrize("fast", [True, False])
def test_a_big_run_is_keyed_as_one_run(monkeypatch, fast):
    # Item by item a million strings take seconds: the run is keyed in one C pass
    # (`_scalars.scalar_run`), and no item reaches the per-object dispatcher that the tuple and
    # list handlers call (checked against the same count with the fast path off).
    from eqxstable._keys import _context, _mutable, _values

    big = [f"w{i}" for i in range(1_000_000 if fast else 1_000)]
    dispatched = 0

    def counting(obj: Any, ctx: Any, content_ok: bool) -> Any:
        nonlocal dispatched
        dispatched += 1
        return _context.key(obj, ctx, content_ok)

    monkeypatch.setattr(_scalars, "ENABLED", fast)
    monkeypatch.setattr(_mutable, "key", counting)
    monkeypatch.setattr(_values, "key", counting)
    assert compute(tuple(big))[0] != compute(big)[0]
    assert dispatched == (0 if fast else 2 * len(big))


@pytest.mark.counts_traces
def test_a_frozen_structure_past_the_budget_is_keyed_by_identity(monkeypatch):
    # A tuple of pairs past the object budget, read by a closure: this very tuple is its key (it
    # can never change), so the closure hits; a closure over an equal copy is another key.
    data = tuple((f"w{i}", i) for i in range(MAX_OBJECTS + 10))
    copy = tuple(list(data))
    traces = 0

    def make(table):
        def f(x):
            nonlocal traces
            traces += 1
            return x * len(table)

        return f

    key = compute(data)[0]
    assert too_many_objects(key)
    assert key == compute(data)[0]
    assert key != compute(copy)[0]
    assert compute(make(data))[0] == compute(make(data))[0]
    assert compute(make(data))[0] != compute(make(copy))[0]
    # Keying the tuple asks `frozen_part` whether it is frozen all the way down (a walk of it all).
    walks = 0
    real = _values.frozen_part

    def counting(obj: Any, ctx: Any) -> Any:
        nonlocal walks
        walks += obj is data
        return real(obj, ctx)

    monkeypatch.setattr(_values, "frozen_part", counting)
    f = es.filter_jit(make(data))
    f(jnp.float32(1.0))
    assert walks >= 1
    walks = 0
    for _ in range(3):
        assert float(f(jnp.float32(1.0))) == len(data)
    assert walks == 0
    assert traces == 1
    g = es.filter_jit(make(data))
    assert float(g(jnp.float32(2.0))) == 2 * len(data)
    assert traces == 1, g.misses
    assert float(es.filter_jit(make(copy))(jnp.float32(2.0))) == 2 * len(data)
    assert traces == 2


@pytest.mark.parametrize(
    "obj, frozen",
    [
        ((1, "a", (2.0, frozenset({b"x", None}))), True),
        ((1, [2]), False),
        ((1, (2, {3: 4})), False),
        ((1, (2, _Str("a"))), False),
        (type("T", (tuple,), {})((1, 2)), False),
        ([1, 2], False),
        ((lambda: 1,), False),
    ],
)
def test_frozen_scalars(obj, frozen):
    assert frozen_scalars(obj) is frozen


@pytest.mark.counts_traces
def test_a_stable_module_with_a_big_static_vocabulary_hits(monkeypatch):
    # Finding 14: the canonical static form's table parts (a pair per word) were walked, past
    # the budget, so the same module missed on every call.
    class Tok(es.StableModule):
        vocab: tuple = eqx.field(static=True)

        def __call__(self, x):
            return x * len(self.vocab)

    vocab = tuple(f"w{i}" for i in range(100_000))
    m = Tok(vocab)
    traces = 0

    @es.filter_jit
    def f(m, x):
        nonlocal traces
        traces += 1
        return m(x)

    f(m, jnp.float32(1.0))
    # A hit keys nothing again: no key computation (a `Walk`) starts, where each hit keyed the
    # 100,000 words before. Counted, not timed (a time limit fails on a loaded machine).
    walks = started_walks(monkeypatch)
    for _ in range(3):
        assert float(f(m, jnp.float32(1.0))) == 100_000
    assert walks == []
    assert traces == 1
    # Another vocabulary of the same size is another program.
    other = Tok(vocab[:-1] + ("other",))
    assert float(f(other, jnp.float32(1.0))) == 100_000
    assert traces == 2
    # An equal module rebuilt hits.
    assert float(f(Tok(tuple(vocab)), jnp.float32(2.0))) == 200_000
    assert traces == 2


@pytest.mark.counts_traces
def test_a_changeable_structure_past_the_budget_is_never_a_hit():
    # A tuple holding lists past the budget: not keyed by identity (a list in it can change
    # where the walk never reached), so the change is seen.
    data = tuple(([i],) for i in range(MAX_OBJECTS + 10))
    f = es.filter_jit(lambda x: x * len(data[-1][0]))
    assert float(f(jnp.float32(1.0))) == 1.0
    data[-1][0].append(0)
    assert float(f(jnp.float32(1.0))) == 2.0
    assert too_many_objects(compute(data)[0])
    assert compute(data)[0] != compute(data)[0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros(1000),
        lambda: np.zeros(1001, np.uint8),
        lambda: np.zeros((40, 30))[:, ::3],
        lambda: np.zeros(3, np.float32),
    ],
    ids=["float64", "odd-bytes", "strided", "float32"],
)
def test_a_watched_array_sees_every_change(make):
    a = make()
    _, watch = compute(lambda: a)
    assert watch.valid()
    flat = a.reshape(-1) if a.flags.c_contiguous else a
    last = (a.ndim and tuple(s - 1 for s in a.shape)) or ()
    a[last] = 1
    assert not watch.valid()
    a[last] = 0
    assert watch.valid()
    if a.flags.c_contiguous:
        # The same bytes under another shape or dtype: a trace reading `a.shape` differs.
        a.shape = (1, *a.shape)
        assert not watch.valid()
        a.shape = a.shape[1:]
        assert watch.valid()
        if flat.dtype == np.float64:
            a.dtype = np.int64
            assert not watch.valid()
            a.dtype = np.float64
            assert watch.valid()


@pytest.mark.counts_traces
def test_a_closure_over_a_reshaped_array_retraces():
    a = np.zeros(4)
    f = es.filter_jit(lambda x: x + a.shape[0])
    assert float(f(jnp.float32(0.0))) == 4.0
    a.shape = (2, 2)
    assert float(f(jnp.float32(0.0))) == 2.0


def test_a_hit_over_a_big_array_is_cheap():
    import tracemalloc

    a = np.zeros(10_000_000)
    _, watch = compute(lambda: a)
    # The bytes are compared where they are, never copied out (80 MB, 0.1-0.3 s a hit): what
    # the check allocates (NumPy reports its buffers to `tracemalloc`) is counted, not timed.
    tracemalloc.start()
    try:
        assert watch.valid()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < a.nbytes // 10


def test_a_user_object_is_watched_once_and_still_seen():
    records = [_Record(i) for i in range(300)]
    _, watch = compute(lambda: records)
    # Each object and its list: one state each (and the function, the list, the class).
    assert len(watch.states) <= 2 * len(records) + 10
    assert watch.valid()
    records[7].v = 7
    assert watch.valid()
    records[7].v = 8
    assert not watch.valid()
    records[7].v = 7
    setattr(records[7], "extra", 1)
    assert not watch.valid()
