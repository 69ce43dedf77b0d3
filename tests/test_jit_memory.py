"""Bounded memory and exact accounting of the stable `filter_jit` (issue 21): programs and what
their keys hold are released with the last wrapper, every cache is an LRU of a stated size, and
the counts agree with a trace counter under transformations, `jax.disable_jit()`, traces that
raise, evictions and clears."""

import dataclasses
import gc
import threading
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse

import eqxstable as es
from eqxstable._jit import _sharing
from eqxstable._jit._lru import LRU, sizes

from .helpers import run_racing


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()
    yield
    es.clear_caches()


@pytest.fixture
def small_sizes():
    saved = dataclasses.replace(sizes)
    yield sizes
    sizes.programs, sizes.entries, sizes.released = saved.programs, saved.entries, saved.released


def _closure_over(array: np.ndarray):
    def f(x):
        return x + array.sum()

    return f


@pytest.mark.skipif(
    not hasattr(jax._src.util, "register_cache"),  # pyright: ignore
    reason="this JAX has no cache registry: only `es.clear_caches()` releases them",
)
def test_dropped_wrapper_releases_what_its_key_holds():
    refs = []
    for i in range(5):
        captured = np.full(1000, float(i))
        refs.append(weakref.ref(captured))
        wrapper = es.filter_jit(_closure_over(captured))
        assert float(wrapper(jnp.zeros(()))) == 1000.0 * i
        del captured, wrapper
    jax.clear_caches()
    gc.collect()
    assert [r() for r in refs] == [None] * 5


def test_only_the_latest_released_programs_are_kept(small_sizes):
    small_sizes.released = 4
    refs = []
    for i in range(30):
        captured = np.full(1000, float(i))
        refs.append(weakref.ref(captured))
        es.filter_jit(_closure_over(captured))(jnp.zeros(()))
        del captured
        gc.collect()
    alive = [i for i, r in enumerate(refs) if r() is not None]
    # Without `jax.clear_caches()`: the latest few stay, for an inline `es.filter_jit(f)(x)`.
    assert len(alive) <= 6 and alive[-1] == 29


@pytest.mark.counts_traces
def test_an_inline_wrapper_still_finds_its_program(small_sizes):
    small_sizes.released = 1
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x + 1

    for _ in range(5):
        es.filter_jit(f)(jnp.ones(2))
        gc.collect()
    assert traces == 1


def test_es_clear_caches_releases_dropped_programs():
    captured = np.ones(1000)
    ref = weakref.ref(captured)
    es.filter_jit(_closure_over(captured))(jnp.zeros(()))
    del captured
    es.clear_caches()
    gc.collect()
    assert ref() is None


def test_a_live_wrapper_keeps_its_program_across_jax_clear_caches():
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x * 2

    wrapper = es.filter_jit(f)
    wrapper(jnp.ones(2))
    jax.clear_caches()
    gc.collect()
    # JAX dropped the compiled program: traced again, and counted.
    assert float(wrapper(jnp.ones(2))[0]) == 2.0
    assert traces == 2
    assert wrapper.cache_info()[:2] == (0, 2)


def test_program_registry_is_an_lru(small_sizes):
    small_sizes.programs = 3
    wrappers = [es.filter_jit(_closure_over(np.full(4, float(i)))) for i in range(10)]
    assert len(_sharing._shared) == 3
    # Evicted from the registry, each wrapper still calls its own program.
    for i, w in enumerate(wrappers):
        assert float(w(jnp.zeros(()))) == 4.0 * i


@pytest.mark.counts_traces
def test_entries_history_and_misses_are_bounded_and_counts_exact(small_sizes):
    small_sizes.entries = 3
    traces = 0

    def f(x, n):
        nonlocal traces
        traces += 1
        return x * n

    wrapper = es.filter_jit(f)
    for n in range(10):
        assert float(wrapper(jnp.ones(()), n)) == n
    info = wrapper.cache_info()
    assert (info.hits, info.misses, info.maxsize, info.currsize) == (0, 10, 3, 3)
    assert len(wrapper._program.cache.entries) == 3
    assert len(wrapper._program.history) == 3
    # `.misses` keeps the latest ones, numbered as they happened.
    assert len(wrapper.misses) == 3
    assert "10. static at `args[1]`" in wrapper.explain()
    # The most recent entry is a hit; an evicted one is traced again, never served stale.
    wrapper(jnp.ones(()), 9)
    assert float(wrapper(jnp.ones(()), 0)) == 0.0
    assert traces == 11
    assert wrapper.cache_info()[:4] == (1, 11, 3, 3)


@pytest.mark.counts_traces
def test_max_entries_bounds_the_programs_of_one_entry(small_sizes):
    # Attack 9b-04: one entry (one static value) called with more shapes than `maxsize` kept a
    # program per shape (currsize 8 with maxsize 2) and served them all. Now an entry whose
    # programs alone exceed the bound is dropped with them: what it served is traced again.
    small_sizes.entries = 2
    traces = 0

    def g(x):
        nonlocal traces
        traces += 1
        return x * 2

    wrapper = es.filter_jit(g)
    for _ in range(2):
        for s in range(1, 9):
            np.testing.assert_allclose(wrapper(jnp.ones(s)), 2.0)
            assert wrapper.cache_info().currsize <= 2
    info = wrapper.cache_info()
    assert traces == 16 and (info.hits, info.misses, info.traces) == (0, 16, 16)
    assert info.compiles <= info.traces and info.maxsize == 2
    # Within the bound, the programs are kept and served.
    wrapper(jnp.ones(20))
    wrapper(jnp.ones(20))
    assert traces == 17 and wrapper.cache_info()[:2] == (1, 17)


def test_lru_weighs_and_evicts():
    evicted = []
    lru: LRU[str, int] = LRU(lambda: 5, lambda k, v: evicted.append(k), weight=lambda v: v)
    lru.set("a", 2)
    lru.set("b", 2)
    assert lru.get("a") == 2  # "a" is now the most recent.
    lru.set("c", 2)
    assert evicted == ["b"] and lru.total == 4 and list(lru) == ["a", "c"]
    lru.set("d", 9)  # Heavier than the bound: only it is kept.
    assert list(lru) == ["d"] and evicted == ["b", "a", "c"]


class _SlowHash:
    """A key whose `__hash__` is Python code: CPython may switch threads inside it, so another
    thread's call can move an item while an `OrderedDict` is copied."""

    def __init__(self, n: int):
        self.n = n

    def __hash__(self) -> int:
        return hash(self.n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SlowHash) and other.n == self.n


def test_lru_copies_while_other_threads_use_it():
    # The jit cache's lookups are not serialised: one thread copies the entries
    # (`pinned_twin(list(entries.values()))`) while another finds one (`get` moves it) or adds
    # one (`set` may evict). No copy raises "mutated during iteration", and the total holds.
    lru: LRU[_SlowHash, int] = LRU(lambda: 48, weight=lambda v: v)
    keys = [_SlowHash(n) for n in range(64)]
    for k in keys[:40]:
        lru.set(k, 1)
    errors: list[BaseException] = []
    stop = threading.Event()

    def use(t: int) -> None:
        i = t
        try:
            while not stop.is_set():
                i = (i + 7) % len(keys)
                if i % 3:
                    lru.get(keys[i])
                else:
                    lru.set(keys[i], 1 + i % 2)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def copy() -> None:
        try:
            for _ in range(300):
                assert all(v in (1, 2) for v in lru.values())
                assert all(isinstance(k, _SlowHash) for k in lru)
                assert all(v in (1, 2) for _, v in lru.items())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            stop.set()

    users = [threading.Thread(target=use, args=(t,)) for t in range(3)]
    run_racing([*users, threading.Thread(target=copy)])
    assert not errors, errors
    assert lru.total == sum(lru.values()) <= 48


def test_max_entries_from_the_environment(monkeypatch):
    from eqxstable._jit._lru import Sizes

    monkeypatch.setenv("EQXSTABLE_MAX_ENTRIES", "17")
    monkeypatch.setenv("EQXSTABLE_MAX_PROGRAMS", "5")
    assert (Sizes().entries, Sizes().programs) == (17, 5)
    monkeypatch.setenv("EQXSTABLE_MAX_ENTRIES", "0")
    with pytest.raises(ValueError, match="EQXSTABLE_MAX_ENTRIES"):
        Sizes()


@dataclasses.dataclass
class _Meta:
    name: str
    size: int


class _Node:
    def __init__(self, x, meta):
        self.x = x
        self.meta = meta


jax.tree_util.register_pytree_node(
    _Node, lambda n: ((n.x,), n.meta), lambda meta, children: _Node(children[0], meta)
)


@pytest.mark.counts_traces
def test_dataclass_node_data_with_eq_hits_like_equinox():
    traces = 0

    def f(node):
        nonlocal traces
        traces += 1
        return node.x * node.meta.size

    wrapper = es.filter_jit(f)
    for _ in range(20):
        assert float(wrapper(_Node(jnp.ones(()), _Meta("a", 2)))) == 2.0
    assert traces == 1
    assert wrapper.cache_info()[:2] == (19, 1)
    assert len(wrapper._program.cache.entries) == 1
    # Another value is another program; the same object changed in place is seen.
    meta = _Meta("a", 3)
    assert float(wrapper(_Node(jnp.ones(()), meta))) == 3.0
    meta.size = 4
    assert float(wrapper(_Node(jnp.ones(()), meta))) == 4.0
    assert traces == 3


@pytest.mark.counts_traces
@pytest.mark.parametrize("transform", ["grad", "vmap", "jit"])
def test_first_call_under_a_transformation_counts_one_trace(transform):
    traces = 0

    def f(m, v):
        nonlocal traces
        traces += 1
        return (m @ v).sum()

    m = sparse.BCOO.fromdense(jnp.eye(3))
    counted = eqx.debug.assert_max_traces(f, max_traces=1)
    stable = es.filter_jit(f, max_traces=1)
    for wrapper in (stable, eqx.filter_jit(counted)):
        traces = 0
        for _ in range(2):
            if transform == "grad":
                jax.grad(lambda v: wrapper(m, v))(jnp.ones(3))
            elif transform == "vmap":
                jax.vmap(lambda v: wrapper(m, v))(jnp.ones((2, 3)))
            else:
                jax.jit(lambda v: wrapper(m, v))(jnp.ones(3))
            with es.no_recompiles():
                assert float(wrapper(m, jnp.ones(3))) == 3.0
        assert traces == 1
    assert stable.cache_info()[:2] == (3, 1)
    assert [m.kind for m in stable.misses] == ["first"]


@pytest.mark.counts_traces
def test_disable_jit_runs_eagerly_and_counts_no_trace():
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x + 1, "tag"

    wrapper = es.filter_jit(f, max_traces=1)
    with jax.disable_jit():
        for _ in range(3):
            out, tag = wrapper(jnp.ones(2))
            assert tag == "tag"
            assert float(out[0]) == 2.0
    assert traces == 3
    assert wrapper.cache_info()[:2] == (3, 0)
    out, tag = wrapper(jnp.ones(2))
    assert tag == "tag" and wrapper.cache_info()[:2] == (3, 1)


def test_a_new_positional_argument_is_a_structure_miss():
    wrapper = es.filter_jit(lambda x, y=1.0: x * y)
    wrapper(jnp.ones(2))
    wrapper(jnp.ones(2), 2.0)
    miss = wrapper.misses[1]
    assert (miss.kind, miss.path) == ("structure", "args[1]")
    assert "did not have" in miss.reason


def _bytes_held(key) -> int:
    if isinstance(key, bytes):
        return len(key)
    if isinstance(key, tuple):
        return sum(map(_bytes_held, key))
    return 0


def test_a_programs_fingerprint_holds_a_digest_of_a_large_constant():
    from eqxstable._jit._fingerprint import param_key, TRACE_ONLY
    from eqxstable._keys._jaxpr import jaxpr_key

    def key(value):
        const = np.full((512, 512), value, np.float32)  # 1 MiB, closed over: a constant.
        return jaxpr_key(jax.make_jaxpr(lambda x: x + const)(1.0), param_key, TRACE_ONLY)

    one, also_one, two = key(1.0), key(1.0), key(2.0)
    assert one == also_one and one != two
    # Every compiled program keeps its fingerprint: not a copy of each constant's bytes.
    assert _bytes_held(one) < 64 * 1024
