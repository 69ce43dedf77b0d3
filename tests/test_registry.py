"""`intern`, `register` and `lookup`: canonical instances, names, threads, memory, rebinding."""

import gc
import threading
import tracemalloc
import weakref
from typing import Any

import jax
import numpy as np
import pytest

import eqxstable as es
from eqxstable import _registry

from .helpers import rebindable


def closure_over(value):
    return lambda x: x * value


def test_rebound_nonlocal_is_never_handed_out():
    es.clear_caches()  # Other tests intern and register closures over small numbers too.
    f, rebind = rebindable(1)
    assert es.intern(f) is f
    rebind(2)  # `f` now computes x * 2.
    g = closure_over(1)
    assert es.stable_key(f) != es.stable_key(g)
    assert es.intern(g) is g
    assert es.intern(f) is f
    assert es.intern(closure_over(2)) is not g


def test_loop_variable_rebinding():
    fs = []
    canonicals = []
    for i in range(3):

        def f(x):
            return x * i  # noqa: B023 (the late binding is what this test is about)

        fs.append(f)
        canonicals.append(es.intern(f))
    # All three share the loop's cell, which now holds 2: equivalent to each other, and to a
    # fresh closure over 2, but never to a closure over 0.
    assert es.stable_key(fs[0]) == es.stable_key(fs[2])
    fresh_zero = closure_over(0)
    assert es.intern(fresh_zero) is fresh_zero


def test_identity_key_never_matches_a_reused_id():
    class Token:
        pass

    es.clear_caches()
    gc.collect()
    dead_keys: dict[int, list] = {}
    reused = 0
    # CPython hands a freed object's memory to the next object of the same size at once, so a
    # new `Token` soon sits where a dead one did: that is the case under test, counted.
    for _ in range(5000):
        token = Token()
        key = es.stable_key(token)
        assert key.identity
        # Any earlier token at this address is dead: its key must not match.
        for old in dead_keys.get(id(token), []):
            reused += 1
            assert key != old
        assert es.intern(token) is token
        dead_keys.setdefault(id(token), []).append(key)
        del token, key
        if reused >= 20:
            break
    assert reused >= 20


def test_function_key_never_matches_a_reused_id():
    class Token:
        pass

    es.clear_caches()
    gc.collect()
    dead_keys: dict[int, list] = {}
    reused = 0
    for _ in range(5000):
        f = closure_over(Token())
        key = es.stable_key(f)
        for old in dead_keys.get(id(f), []):
            reused += 1
            assert key != old
        dead_keys.setdefault(id(f), []).append(key)
        del f, key
        if reused >= 20:
            break
    assert reused >= 20


def test_memo_does_not_leak_key_into_reused_id():
    seen = {}
    for i in range(500):
        f = closure_over(i)
        key = es.stable_key(f)
        assert key == es.stable_key(closure_over(i))
        seen.setdefault(id(f), set()).add(key)
        del f
    assert any(len(keys) > 1 for keys in seen.values())


def test_threads_get_one_canonical_instance():
    barrier = threading.Barrier(8)
    results = []
    lock = threading.Lock()
    value = 123.25

    def work():
        candidates = [closure_over(value) for _ in range(50)]
        barrier.wait()
        out = [es.intern(c) for c in candidates]
        with lock:
            results.extend(out)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 400
    assert len({id(r) for r in results}) == 1


def test_registry_does_not_keep_alive_what_only_it_references():
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        entries = len(_registry._weak)
        last = None
        for _ in range(400):
            big = np.ones(25_000)  # 200 kB each, 80 MB if kept
            f = closure_over(big)
            es.intern(f)
            es.stable_key(f)
            last = weakref.ref(big)
            del big, f
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - baseline
    finally:
        tracemalloc.stop()
    assert last is not None and last() is None
    assert grown < 20_000_000
    assert len(_registry._weak) - entries < 200


def test_self_referencing_closures_terminate():
    def make():
        def even(n):
            return True if n == 0 else odd(n - 1)

        def odd(n):
            return False if n == 0 else even(n - 1)

        return even

    a, b = make(), make()
    assert es.stable_key(a) == es.stable_key(b)
    # Equivalent (one program under `es.filter_jit`), but never substituted: `even` reaches its
    # own object through `odd`'s cell, so it may use it as state (`even.depth = 3`), which must
    # change `a` alone (tests/test_registry_self_reference.py).
    assert es.intern(a) is a and es.intern(b) is b


def test_register_and_lookup():
    def swish(x):
        return x * jax.nn.sigmoid(x)

    name = "test_register_and_lookup.swish"
    assert es.register(name, swish) is swish
    assert es.lookup(name) is swish

    @es.register("test_register_and_lookup.decorated")
    def decorated(x):
        return x + 1

    assert es.lookup("test_register_and_lookup.decorated") is decorated


def test_register_equivalent_returns_canonical():
    name = "test_register_equivalent.act"
    first = es.register(name, closure_over(3))
    assert es.register(name, closure_over(3)) is first


def test_register_conflict_names_both():
    name = "test_register_conflict.act"
    es.register(name, closure_over(1))
    with pytest.raises(es.RegistryError, match=r"already registered to .*lambda.*not equivalent"):
        es.register(name, closure_over(2))
    assert es.lookup(name)(3) == 3


def test_lookup_unknown_lists_close_matches():
    es.register("relu_squared", closure_over(1))
    with pytest.raises(es.RegistryError, match="Did you mean 'relu_squared'"):
        es.lookup("relu_sqared")
    with pytest.raises(KeyError):
        es.lookup("nothing-like-it-at-all")


def test_register_name_must_be_str():
    with pytest.raises(TypeError, match=r"`eqxstable.register\(name, ...\)`: `name` must be a str"):
        es.register(3, closure_over(1))  # pyright: ignore


def test_clear_caches_keeps_names():
    name = "test_clear_caches.act"
    f = es.register(name, closure_over(5))
    g = closure_over(9)
    es.intern(g)
    es.clear_caches()
    assert es.lookup(name) is f
    assert es.intern(closure_over(9)) is not g


def test_strong_table_holds_exactly_its_bound():
    for i in range(_registry._MAX_STRONG + 100):
        es.intern((i, "full"))
    assert len(_registry._strong) == _registry._MAX_STRONG
    # The oldest went first: the newest is still canonical, the first is not.
    newest, first = (_registry._MAX_STRONG + 99, "full"), (0, "full")
    assert es.intern(newest) is not newest
    assert es.intern(first) is first


def test_what_is_keyed_by_identity_is_not_stored():
    weak, strong = len(_registry._weak), len(_registry._strong)
    kept = [[i] for i in range(5)] + [type("Plain", (), {})() for _ in range(5)]
    for obj in kept:
        assert es.intern(obj) is obj
    assert (len(_registry._weak), len(_registry._strong)) == (weak, strong)


def _make_scaler():
    def f(x):
        return x * 2.0

    return f


@pytest.mark.parametrize("wrap", [lambda f: f, lambda f: (f,)], ids=["weak", "strong"])
def test_a_canonical_changed_since_it_was_interned_is_never_handed_out(wrap):
    # A function's attributes are part of its key; set one on the canonical instance and it no
    # longer stands for its old class (a tuple holding it is stored strongly, a function weakly).
    first = wrap(_make_scaler())
    assert es.intern(first) is first
    (first if callable(first) else first[0]).scale = 3.0  # pyright: ignore[reportFunctionMemberAccess]
    second = wrap(_make_scaler())
    assert es.stable_key(second) != es.stable_key(first)
    assert es.intern(second) is second
    assert es.intern(wrap(_make_scaler())) is second
    assert es.intern(first) is first


def _nest(x, depth):
    for _ in range(depth):
        x = (x,)
    return x


def _innermost(t, depth) -> Any:
    for _ in range(depth):
        t = t[0]
    return t


def test_tuples_holding_arrays_are_never_substituted_at_any_depth():
    # Down to the depth limit an array is keyed by its bytes; past it by its identity and
    # bytes. Either way the tuple holding it is the user's own: Python compares a tuple's items
    # by `is` first, so a tuple holding a copy of the array would not be `==` to the user's.
    limit = _registry.MAX_DEPTH
    a, b = np.ones(2), np.ones(2)
    assert es.stable_key(_nest(a, limit)) == es.stable_key(_nest(b, limit))
    t = _nest(a, limit)
    assert es.intern(t) is t
    a, b = np.ones(2), np.ones(2)
    assert es.stable_key(_nest(a, limit + 1)) != es.stable_key(_nest(b, limit + 1))
    assert _innermost(es.intern(_nest(a, limit + 1)), limit + 1) is a
