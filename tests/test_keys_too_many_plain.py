"""A function closing over more plain objects than the key's budget (`K-too-deep`,
`_budget.run_out`; attack round 9a, finding 02): its key equals nothing (nothing it holds could
be watched), and each keying walked 50,000 objects before giving up (17 s at every jitted call).
A list or tuple holding more distinct plain objects than the budget has left now gives up after a
scan of them, exactly where the walk would have run out; the jitted function's miss says that it
reaches too many objects, not that a value it reads was rebound; its program is reused by jaxpr
(a miss costs a trace, not a compile)."""

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._jit._fingerprint import AVAILABLE as FINGERPRINTS
from eqxstable._keys import _budget, _values, clear, too_many_objects


# Past a budget of 2,000 objects (`small_budget`).
_N = 2_010


class Record:
    def __init__(self, i):
        self.i = i


def _no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk as it was: no scan before walking a big list or tuple."""
    monkeypatch.setattr(_budget, "run_out", lambda items, ctx: None)
    monkeypatch.setattr(_values, "run_out", lambda items, ctx: None)


@pytest.mark.usefixtures("small_budget")
@pytest.mark.parametrize("kind", [list, tuple])
def test_too_many_plain_objects_give_up_without_a_walk(walks, kind):
    data = kind(Record(i) for i in range(_N))
    reader = lambda x: x + len(data)  # noqa: E731
    key = es.stable_key(reader)
    assert too_many_objects(key)
    # One start, and it walked the reader's few parts, not the records.
    assert len(walks) == 1
    assert walks[0] < 50
    assert es.stable_key(reader) != key


@pytest.mark.usefixtures("small_budget")
def test_objects_met_before_are_not_counted_again(walks):
    # 1,500 records walked through `a`, then `b` holds them and 400 more: 1,900 in all, under
    # the budget, though `b` alone is longer than what the budget has left after `a`.
    shared = [Record(i) for i in range(1_500)]
    a = list(shared)
    b = shared + [Record(i) for i in range(400)]
    reader = lambda x: x + len(a) + len(b)  # noqa: E731
    key = es.stable_key(reader)
    assert not too_many_objects(key)
    assert es.stable_key(reader) == key


@pytest.mark.usefixtures("small_budget")
@settings(max_examples=15, deadline=None)
@given(
    distinct=st.integers(1_900, 2_100),
    repeated=st.integers(0, 300),
    before=st.integers(0, 300),
    ints=st.integers(0, 300),
    as_tuple=st.booleans(),
)
def test_the_scan_gives_the_walks_answer(distinct, repeated, before, ints, as_tuple):
    # Exactly where the walk runs out, the scan gives up; elsewhere it walks as before.
    records = [Record(i) for i in range(distinct)]
    items = records + records[:repeated] + list(range(ints))
    data = tuple(items) if as_tuple else items
    earlier = records[:before]
    reader = lambda x: x + len(earlier) + len(data)  # noqa: E731
    fast = too_many_objects(es.stable_key(reader))
    with pytest.MonkeyPatch.context() as patch:
        _no_scan(patch)
        clear()
        slow = too_many_objects(es.stable_key(reader))
    clear()
    assert fast == slow


@pytest.mark.counts_traces
@pytest.mark.usefixtures("small_budget")
def test_the_miss_says_too_many_objects_and_reuses_the_program():
    data = [Record(i) for i in range(_N)]
    traces = 0

    def count(x):
        nonlocal traces
        traces += 1
        return x + len(data)

    f = es.filter_jit(count)
    assert float(f(jnp.float32(1.0))) == 1.0 + _N
    assert float(f(jnp.float32(2.0))) == 2.0 + _N
    # Its key equals nothing: it traces again (sound), yet the same jaxpr reuses the program.
    assert traces == 2
    info = f.cache_info()
    # (A JAX without reuse by fingerprint, the floor's, compiles each trace.)
    assert info.compiles == (1 if FINGERPRINTS else 2)
    miss = f.misses[-1]
    assert miss.kind == "identity"
    assert "too many objects" in miss.reason
    assert f"a list of {_N:,} items (Record)" in miss.reason
    assert "rebound" not in miss.reason
