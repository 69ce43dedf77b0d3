"""An empty closure cell that can never be filled holds no state: closures rebuilt alike share a
key (optax's schedules, whose `clip_fn` cell stays empty when no bound is given). An empty cell
that may still be filled (the enclosing frame runs on, another function shares it) keeps its
identity, and filling one is seen."""

import jax.numpy as jnp
import pytest

import eqxstable as es


optax = pytest.importorskip("optax")


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


def _factory(flag: bool):
    if flag:
        y = 2.0

    def f(x):
        return x * y if flag else x  # pyright: ignore[reportPossiblyUnboundVariable]

    return f


def test_empty_cell_for_good_is_shared():
    assert es.stable_key(_factory(False)) == es.stable_key(_factory(False))
    assert es.intern(_factory(False)) is es.intern(_factory(False))
    # A full cell and an empty one never share.
    assert es.stable_key(_factory(True)) != es.stable_key(_factory(False))


def test_empty_cell_still_fillable_keeps_identity():
    keys = []
    fs = []
    for _ in range(2):

        def outer():
            def f(x):
                return x * y

            # The frame of `outer` still holds the cell: `y` is assigned below.
            keys.append(es.stable_key(f))
            y = 3.0
            return f

        fs.append(outer())
    assert keys[0] != keys[1]
    assert fs[0](2.0) == 6.0


def test_empty_cell_shared_with_a_setter_keeps_identity():
    def make(start: bool):
        if start:
            y = 1.0

        def f(x):
            return x * y

        def fill(v):
            nonlocal y
            y = v

        return f, fill

    f1, fill1 = make(False)
    f2, _ = make(False)
    assert es.stable_key(f1) != es.stable_key(f2)
    fill1(5.0)
    assert es.stable_key(f1) != es.stable_key(f2)
    assert f1(1.0) == 5.0


def test_filled_through_cell_contents_is_seen():
    f = _factory(False)
    g = _factory(False)
    before = es.stable_key(f)
    assert before == es.stable_key(g)
    assert f.__closure__ is not None
    f.__closure__[0].cell_contents = 9.0
    assert es.stable_key(f) != before


@pytest.mark.counts_traces
def test_optax_schedule_rebuilt_shares_a_program():
    def make():
        return optax.adam(optax.exponential_decay(1e-3, 100, 0.9))

    traces = 0

    @es.filter_jit
    def step(opt, p):
        nonlocal traces
        traces += 1
        updates, _ = opt.update(p, opt.init(p), p)
        return updates

    p = jnp.ones(3)
    out1 = step(make(), p)
    out2 = step(make(), p)
    assert traces == 1
    assert step.cache_info().misses == 1
    assert jnp.array_equal(out1, out2)
    # Another decay rate is another program.
    step(optax.adam(optax.exponential_decay(1e-3, 100, 0.5)), p)
    assert traces == 2
