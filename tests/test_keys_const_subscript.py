"""`K-const-subscript`: a global exact tuple that a function reads only as `TABLE[k]`, `k` an
`int` constant in its bytecode, is keyed by its length and those items alone (crawl 12a-10: a
hit over a table of 200,000 frozen records compared every record). Any other read of the name
in the same code (iteration, `len`, a computed index, passed on, a nested function loading it,
`globals()`, a store) keys the whole table, and every answer is the eager one."""

import dataclasses
import sys
import typing

import equinox as eqx
import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import eqxstable as es
from eqxstable._keys import stable_key
from eqxstable._keys._code import reads
from eqxstable._keys._subscripts import cell_subscripts


@dataclasses.dataclass(frozen=True)
class Rec:
    a: int
    b: float


class Pair(typing.NamedTuple):
    a: int
    b: float


TABLE: typing.Any = tuple(Rec(i, float(i)) for i in range(8))
X = jnp.ones(2)


def _item(x):
    return x * TABLE[3].b


def _two(x):
    return x * TABLE[3].b + TABLE[-1].a


def _nested(x):
    return x * [TABLE[3].b for _ in range(2)][0]


def _out_of_range(x):
    try:
        return x * TABLE[50].b
    except IndexError:
        return x * 0.0


def _len(x):
    return x * TABLE[3].b * len(TABLE)


def _computed(x, i=3):
    return x * TABLE[i].b


def _iterated(x):
    return x * TABLE[3].b + sum(r.b for r in TABLE)


def _sliced(x):
    return x * TABLE[3].b + TABLE[5:][0].b


def _passed(x):
    return x * TABLE[3].b + _total(TABLE)


def _total(t):
    return sum(r.b for r in t)


def _closure_loads(x):
    return x * TABLE[3].b + (lambda: TABLE)()[5].b


def _dynamic(x):
    return x * TABLE[3].b + globals()["TABLE"][5].b


def _by_name(x):
    return x * TABLE[3].b + getattr(sys.modules[__name__], "TABLE")[5].b


def _stores(x):
    global TABLE
    y = x * TABLE[3].b
    TABLE = TABLE
    return y


def _augmented(x):
    return x * TABLE[3].b + TABLE[5].b


SUBSCRIPT_ONLY = [_item, _two, _nested, _out_of_range, _augmented]
WHOLE = [_len, _computed, _iterated, _sliced, _passed, _closure_loads, _dynamic, _by_name, _stores]


@pytest.fixture(autouse=True)
def _table():
    # A fresh table each test: some write its records past frozen.
    global TABLE
    TABLE = tuple(Rec(i, float(i)) for i in range(8))
    yield


def test_bytecode_analysis():
    assert reads(_item.__code__).subscripts == {"TABLE": (3,)}
    assert reads(_two.__code__).subscripts == {"TABLE": (-1, 3)}
    assert reads(_nested.__code__).subscripts == {"TABLE": (3,)}
    for f in [_len, _computed, _iterated, _sliced, _passed, _closure_loads, _by_name, _stores]:
        assert "TABLE" not in reads(f.__code__).subscripts, f.__name__


def _rebuilt(t, index, rec):
    return (*t[:index], rec, *t[index + 1 :])


def test_only_the_items_read_are_keyed():
    global TABLE
    before = stable_key(_item)
    TABLE = _rebuilt(TABLE, 5, Rec(5, 99.0))  # another table, the item read unchanged
    assert stable_key(_item) == before
    TABLE = _rebuilt(TABLE, 3, Rec(3, 99.0))
    assert stable_key(_item) != before
    for f in WHOLE:
        # Read whole: a table that differs anywhere is another key.
        TABLE = tuple(Rec(i, float(i)) for i in range(8))
        whole = stable_key(f)
        TABLE = _rebuilt(TABLE, 5, Rec(5, 99.0))
        assert stable_key(f) != whole, f.__name__


def test_length_and_out_of_range_are_keyed():
    global TABLE
    before = stable_key(_two)
    TABLE = (*TABLE, Rec(8, 8.0))  # `TABLE[-1]` is another item
    assert stable_key(_two) != before
    TABLE = TABLE[:4]
    np.testing.assert_allclose(es.filter_jit(_out_of_range)(X), 0.0)
    TABLE = tuple(Rec(i, float(i)) for i in range(60))
    np.testing.assert_allclose(es.filter_jit(_out_of_range)(X), 50.0)


def test_other_kinds_of_global_are_keyed_whole():
    global TABLE
    step = es.filter_jit(_item)
    np.testing.assert_allclose(step(X), 3.0)
    TABLE = list(TABLE)
    np.testing.assert_allclose(step(X), 3.0)
    TABLE[3] = Rec(3, 7.0)  # a list changes in place
    np.testing.assert_allclose(step(X), 7.0)
    TABLE = tuple(Pair(i, float(i)) for i in range(8))  # items of another kind
    np.testing.assert_allclose(step(X), 3.0)
    TABLE = Pair(1, 2.0)  # a NamedTuple (its `__getitem__` may be a subclass's): read whole
    with pytest.raises(IndexError):
        step(X)


@pytest.mark.counts_traces
def test_a_record_written_past_frozen_is_seen():
    step = es.filter_jit(_item)
    np.testing.assert_allclose(step(X), 3.0)
    first = step.cache_info().misses  # 0 or 1: another test may have traced this table
    object.__setattr__(TABLE[3], "b", 5.0)
    np.testing.assert_allclose(step(X), 5.0)
    TABLE[3].__dict__["b"] = 6.0
    np.testing.assert_allclose(step(X), 6.0)
    object.__setattr__(TABLE[5], "b", 9.0)  # not read
    np.testing.assert_allclose(step(X), 6.0)
    assert step.cache_info().misses == first + 2


def _calls_per_hit(step) -> int:
    step(X)
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(profile)
    try:
        step(X)
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.counts_traces
def test_a_hit_does_not_grow_with_the_table():
    global TABLE
    counts, keys = [], []
    for n in (1_000, 1_000, 200_000):
        TABLE = tuple(Rec(i, float(i)) for i in range(n))
        counts.append(_calls_per_hit(es.filter_jit(_item)))
        keys.append(repr(stable_key(_item)).replace(str(n), "N"))
    # The key names the length and the item read, nothing of the other records (the
    # whole-table key held the tuple's identity and every record's state), and a hit makes
    # about as many calls over 200,000 records as over 1,000 (a few: the caches' bookkeeping).
    assert keys[0] == keys[1] == keys[2]
    assert "Identity" not in keys[2]
    assert counts[2] <= counts[1] + 8, counts
    step = es.filter_jit(_item)
    np.testing.assert_allclose(step(X), 3.0)
    assert step.cache_info().misses == 0  # the program of the same key, traced above


def _closures(table):
    def item(x):
        return x * table[3].b

    def whole(x):
        return x * table[3].b * len(table)

    def passed_on(x):
        return x * (lambda: table)()[3].b

    def nested(x):
        return x * [table[3].b for _ in range(2)][0]

    def dynamic(x):
        return x * table[3].b + locals()["x"] * 0

    return item, whole, passed_on, nested, dynamic


def _with_setter(table):
    # A cell a `nonlocal` setter can rebind: keyed with its identity (`K-cell`), watched.
    def item(x):
        return x * table[3].b

    def whole(x):
        return x * sum(r.b for r in table)

    def setter(t):
        nonlocal table
        table = t

    return item, whole, setter


def test_closure_cells_bytecode_analysis():
    item, whole, passed_on, nested, dynamic = _closures(TABLE)
    assert cell_subscripts(item.__code__) == {"table": (3,)}
    assert cell_subscripts(nested.__code__) == {"table": (3,)}
    assert cell_subscripts(whole.__code__) == {}
    assert cell_subscripts(passed_on.__code__) == {}
    assert cell_subscripts(dynamic.__code__) == {"table": (3,)}  # `_dynamic` keys it whole


def test_closure_cells_only_the_items_read_are_keyed():
    item, whole, _, nested, dynamic = _closures(TABLE)
    other = _rebuilt(TABLE, 5, Rec(5, 99.0))
    item2, whole2, _, nested2, dynamic2 = _closures(other)
    assert stable_key(item) == stable_key(item2)
    assert stable_key(nested) == stable_key(nested2)
    assert stable_key(whole) != stable_key(whole2)
    assert stable_key(dynamic) != stable_key(dynamic2)  # `locals()`: read whole
    item, _, setter = _with_setter(TABLE)
    step = es.filter_jit(item)
    np.testing.assert_allclose(step(X), 3.0)
    setter(_rebuilt(TABLE, 3, Rec(3, 7.0)))  # the cell rebound by a `nonlocal` setter
    np.testing.assert_allclose(step(X), 7.0)
    closure = item.__closure__
    assert closure is not None
    object.__setattr__(closure[0].cell_contents[3], "b", 8.0)
    np.testing.assert_allclose(step(X), 8.0)


# Differential: random mutations of the table, compared with eager Python and with Equinox
# over a rebuilt reader (a new function object each call: Equinox traces it afresh).
_mutations = st.one_of(
    st.tuples(st.just("rebuild"), st.integers(0, 7), st.floats(-4, 4, width=32)),
    st.tuples(st.just("setattr"), st.integers(0, 7), st.floats(-4, 4, width=32)),
    st.tuples(st.just("grow"), st.just(0), st.floats(-4, 4, width=32)),
    st.tuples(st.just("shrink"), st.just(0), st.just(0.0)),
)


def _mutate(op, index, value):
    global TABLE
    index = index % len(TABLE)
    if op == "rebuild":
        TABLE = _rebuilt(TABLE, index, Rec(index, value))
    elif op == "setattr":
        object.__setattr__(TABLE[index], "b", value)
    elif op == "grow":
        TABLE = (*TABLE, Rec(len(TABLE), value))
    elif len(TABLE) > 6:
        TABLE = TABLE[:-1]


def _eager(f):
    return np.asarray(f(np.ones(2, np.float32)))


@pytest.mark.counts_traces
@settings(max_examples=25, deadline=None)
@given(st.lists(_mutations, min_size=1, max_size=6))
def test_differential_against_eager_and_equinox(mutations):
    global TABLE
    TABLE = tuple(Rec(i, float(i)) for i in range(8))
    functions = [*SUBSCRIPT_ONLY, _len, _iterated, _dynamic]
    jitted = [es.filter_jit(f) for f in functions]
    run_es = es.filter_jit(lambda h, x: h(x))
    run_eqx = eqx.filter_jit(lambda h, x: h(x))
    *kept, setter = _with_setter(TABLE)
    kept_jitted = [es.filter_jit(f) for f in kept]
    for mutation in [("rebuild", 0, 0.0), *mutations]:
        _mutate(*mutation)
        for f, step in zip(functions, jitted):
            want = _eager(f)
            np.testing.assert_allclose(step(X), want, rtol=1e-6)
            rebuilt = lambda x, f=f: f(x)  # noqa: E731
            np.testing.assert_allclose(run_es(rebuilt, X), want, rtol=1e-6)
            np.testing.assert_allclose(run_eqx(rebuilt, X), want, rtol=1e-6)
        # Closures rebuilt over the table as it is now, and one whose cell a setter rebinds.
        for f in _closures(TABLE):
            want = _eager(f)
            np.testing.assert_allclose(run_es(f, X), want, rtol=1e-6)
            np.testing.assert_allclose(run_eqx(f, X), want, rtol=1e-6)
        setter(TABLE)
        for f, step in zip(kept, kept_jitted):
            np.testing.assert_allclose(step(X), _eager(f), rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(_mutations, min_size=1, max_size=4), st.lists(_mutations, min_size=1, max_size=4))
def test_an_equal_fast_key_gives_the_same_answer(first, second):
    """Soundness of the fast key against the whole-table key: wherever two states of the table
    give `_item`/`_two`/`_nested` equal keys, eager Python gives the same answer; and where the
    whole-table key (`_len`, `_iterated`) is equal, so is the fast one."""
    global TABLE
    states = []
    for mutations in (first, second):
        TABLE = tuple(Rec(i, float(i)) for i in range(8))
        for m in mutations:
            _mutate(*m)
        fast = {f: (stable_key(f), _eager(f).tolist()) for f in SUBSCRIPT_ONLY}
        whole = stable_key(_iterated)
        states.append((fast, whole))
    (fast_a, whole_a), (fast_b, whole_b) = states
    for f in SUBSCRIPT_ONLY:
        if fast_a[f][0] == fast_b[f][0]:
            assert fast_a[f][1] == fast_b[f][1], f.__name__
    if whole_a == whole_b:
        assert all(fast_a[f][0] == fast_b[f][0] for f in SUBSCRIPT_ONLY)
