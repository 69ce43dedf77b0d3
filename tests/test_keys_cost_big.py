"""What a hit costs over a big structure (attack round 5, findings 06, 09, 14): a watch of a
container with more than 256 items must hold while nothing changed (CPython caches only small
ints, so a length compared with `is` never matched again), and the fast paths over containers of
exact scalars must give the slow path's answer exactly."""

import time

import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._keys import compute


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
def test_a_hit_over_a_big_list_does_not_rekey():
    big = [0] * 200_000
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x + big[0]

    g = es.filter_jit(f)
    g(jnp.float32(1.0))
    start = time.perf_counter()
    for _ in range(5):
        g(jnp.float32(1.0))
    # Before: each hit re-keyed the 200k items (about 0.4 s each).
    assert time.perf_counter() - start < 1.0
    big[0] = 2
    assert float(g(jnp.float32(1.0))) == 3.0
    assert traces == 2
