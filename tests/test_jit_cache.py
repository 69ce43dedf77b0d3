"""The jit cache's hit path and the `Watch` under it: every static is watched, however many there
are and wherever they live, and an unchanged static is served without a trace (counted)."""

import types
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import compute, merge, Watch
from eqxstable._keys._watch import MISSING


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


def counted(fn):
    """`es.filter_jit(fn)` and a function reading how often `fn`'s body was traced."""
    traces = 0

    def body(*args):
        nonlocal traces
        traces += 1
        return fn(*args)

    return es.filter_jit(body), lambda: traces


def apply_both(x, f, g):
    return f(x) + g(x)


def from_source(factor: float) -> types.FunctionType:
    """`x * FACTOR` compiled in a namespace of its own: two of these read two different dicts."""
    namespace: dict[str, Any] = {"FACTOR": factor}
    exec(compile("def scale(x):\n    return x * FACTOR\n", "<cache-test>", "exec"), namespace)
    return namespace["scale"]


@pytest.mark.counts_traces
def test_every_static_is_watched_not_only_the_first():
    # Two statics reading a global of the same name in two namespaces: each is checked.
    f, g = from_source(1.0), from_source(2.0)
    jitted, traces = counted(apply_both)
    x = jnp.ones(2)
    np.testing.assert_allclose(jitted(x, f, g), 3.0)
    np.testing.assert_allclose(jitted(x, f, g), 3.0)
    assert traces() == 1
    g.__globals__["FACTOR"] = 5.0
    np.testing.assert_allclose(jitted(x, f, g), 6.0)
    f.__globals__["FACTOR"] = 4.0
    np.testing.assert_allclose(jitted(x, f, g), 9.0)
    assert traces() == 3


@pytest.mark.counts_traces
def test_every_captured_array_is_watched():
    a, b = np.ones(2, np.float32), np.ones(2, np.float32)
    f = (lambda arr: lambda x: x * arr)(a)
    g = (lambda arr: lambda x: x * arr)(b)
    jitted, traces = counted(apply_both)
    x = jnp.ones(2)
    np.testing.assert_allclose(jitted(x, f, g), 2.0)
    b[0] = 3.0
    np.testing.assert_allclose(jitted(x, f, g), [4.0, 2.0])
    a[1] = 5.0
    np.testing.assert_allclose(jitted(x, f, g), [4.0, 6.0])
    np.testing.assert_allclose(jitted(x, f, g), [4.0, 6.0])
    assert traces() == 3


def test_every_captured_list_is_watched():
    s1, s2 = [1.0], [2.0]
    f = (lambda s: lambda x: x * s[-1])(s1)
    g = (lambda s: lambda x: x * s[-1])(s2)
    jitted, traces = counted(apply_both)
    x = jnp.ones(1)
    np.testing.assert_allclose(jitted(x, f, g), 3.0)
    s2.append(3.0)  # A longer list: the length is part of the check.
    np.testing.assert_allclose(jitted(x, f, g), 4.0)
    s1.append(5.0)
    np.testing.assert_allclose(jitted(x, f, g), 8.0)
    assert traces() == 3


def test_appended_list_captured_by_a_static_lambda_retraces():
    scales = [2.0]
    act = lambda v: v * len(scales)  # noqa: E731
    jitted, traces = counted(lambda x, f: f(x))
    np.testing.assert_allclose(jitted(jnp.ones(1), act), 1.0)
    scales.append(3.0)
    np.testing.assert_allclose(jitted(jnp.ones(1), act), 2.0)
    assert traces() == 2


def uses_builtins(x):
    return x * len((1, 2))


@pytest.mark.counts_traces
def test_a_function_reading_builtins_is_served_without_a_trace():
    jitted, traces = counted(lambda x, f: f(x))
    for _ in range(3):
        np.testing.assert_allclose(jitted(jnp.ones(1), uses_builtins), 2.0)
    assert traces() == 1
    key, watch = compute(uses_builtins)
    assert watch.valid()
    assert compute(uses_builtins)[1].valid()


class Static(eqx.Module):
    value: Any = eqx.field(static=True)


@pytest.mark.counts_traces
def test_static_fields_compared_type_exactly():
    jitted, traces = counted(lambda m, x: x * m.value)
    x = jnp.ones(1, jnp.float32)
    assert jitted(Static(1), x).dtype == jnp.float32
    out = jitted(Static(True), x)
    np.testing.assert_allclose(out, 1.0)
    assert jitted(Static(1.0), x).dtype == jnp.float32
    assert traces() == 3
    jitted(Static(1), x)
    assert traces() == 3


@pytest.mark.counts_traces
def test_node_data_rebuilt_per_call_is_not_a_new_key():
    # A dict's keys are fresh lists on every flatten: equal ones hit, without a trace.
    jitted, traces = counted(lambda d: d["a"] * 2)
    for _ in range(3):
        np.testing.assert_allclose(jitted({"a": jnp.ones(1)}), 2.0)
    assert traces() == 1
    np.testing.assert_allclose(jitted({"a": jnp.ones(1), "b": jnp.ones(1)}), 2.0)
    assert traces() == 2


#
# `Watch` itself.
#


def test_watch_is_truthy_when_it_checks_anything():
    d = {"x": 1}
    assert not Watch()
    assert Watch(names=((d, "x", 1),))
    assert Watch(blobs=((np.ones(1), b""),))
    assert Watch(states=((d, lambda o: (), ()),))
    assert len(Watch(names=((d, "x", 1),), blobs=((np.ones(1), b""),))) == 2


def test_watch_valid_until_something_changes():
    d: dict[str, Any] = {"x": 1}
    arr = np.ones(2)
    items = [1.0]
    w = Watch(
        states=((items, lambda o: (len(o), *o), (1, items[0])),),
        # A name recorded as absent stays valid while it is absent.
        names=((d, "x", d["x"]), (d, "missing", MISSING)),
        blobs=((arr, arr.tobytes()),),
    )
    assert w.valid()
    assert w.weak().weak_valid()
    strong = w.weak().strong()
    assert strong is not None and strong.valid()
    d["missing"] = None
    assert not w.valid() and not w.weak().weak_valid()
    del d["missing"]
    assert w.valid()
    items.append(2.0)
    assert not w.valid() and not w.weak().weak_valid()
    items.pop()
    arr[0] = 2.0
    assert not w.valid() and not w.weak().weak_valid()
    arr[0] = 1.0
    d["x"] = 2
    assert not w.valid() and not w.weak().weak_valid()


def test_merge_keeps_one_check_per_object_and_name():
    d1, d2 = {"x": 1}, {"x": 2}
    a1, a2 = np.ones(1), np.ones(1)
    w1 = Watch(names=((d1, "x", 1),), blobs=((a1, a1.tobytes()),))
    w2 = Watch(names=((d2, "x", 2), (d1, "x", 1)), blobs=((a2, a2.tobytes()), (a1, a1.tobytes())))
    merged = merge([w1, w2])
    assert len(merged.names) == 2 and len(merged.blobs) == 2
    assert merged.valid()
    d2["x"] = 3
    assert not merged.valid()
    d2["x"] = 2
    a2[0] = 0.0
    assert not merged.valid()


def test_memoised_key_and_watch_are_the_computed_ones():
    def f(x):
        return x * len(Static.__name__)

    key1, watch1 = compute(f)
    key2, watch2 = compute(f)  # from the memo
    assert key1 == key2
    assert len(watch1) == len(watch2) and watch2.valid()
    assert [n[2] for n in watch2.names] == [n[2] for n in watch1.names]


class Tagged:
    """A pytree node whose node data is its tag itself (the same object on every flatten)."""

    def __init__(self, x, tag):
        self.x, self.tag = x, tag


jtu.register_pytree_node(Tagged, lambda t: ((t.x,), t.tag), lambda tag, xs: Tagged(xs[0], tag))


class Configured:
    """A pytree node whose `flatten` returns a fresh dict as its node data on every call."""

    def __init__(self, x, options):
        self.x, self.options = x, options


jtu.register_pytree_node(
    Configured,
    lambda c: ((c.x,), {"scale": c.options["scale"]}),  # pyright: ignore[reportArgumentType]
    lambda options, xs: Configured(xs[0], options),
)


@pytest.mark.counts_traces
def test_node_data_made_afresh_by_each_flatten_is_keyed_by_contents():
    jitted, traces = counted(lambda c: c.x * c.options["scale"])
    x = jnp.ones(1)
    for _ in range(3):
        np.testing.assert_allclose(jitted(Configured(x, {"scale": 2.0})), 2.0)
    assert traces() == 1
    np.testing.assert_allclose(jitted(Configured(x, {"scale": 3.0})), 3.0)
    np.testing.assert_allclose(jitted(Configured(x, {"scale": 3})), 3.0)
    assert traces() == 3


@pytest.mark.counts_traces
def test_the_hit_path_computes_no_key(monkeypatch):
    # Hits are checked with identity comparisons only (`Watch.valid`, the node data): a key is
    # computed again only when something changed.
    from eqxstable._jit import _cache

    computed = []
    for name in ("compute", "compute_node_data"):
        real = getattr(_cache, name)
        monkeypatch.setattr(_cache, name, lambda x, real=real: computed.append(x) or real(x))
    scales = [2.0]
    act = lambda v: v * scales[0] * len((1,))  # noqa: E731
    jitted, traces = counted(lambda t, m, x, f: t.x * t.tag * f(x))
    x = jnp.ones(1, jnp.int32)
    # Node data of both kinds: a plain value (compared by identity) and a module's static
    # fields (a tuple, compared item by item).
    args = (Tagged(x, 3), Static((1, "a")), x, act)
    np.testing.assert_array_equal(jitted(*args), [6.0])
    first = len(computed)
    assert first > 0
    for _ in range(3):
        jitted(*args)
    assert len(computed) == first and traces() == 1
    scales[0] = 4.0
    np.testing.assert_array_equal(jitted(*args), [12.0])
    assert len(computed) > first and traces() == 2


def test_dict_keys_that_compare_equal_across_types():
    # `{1: x}` and `{True: x}` have treedefs that compare equal; the function sees the key.
    jitted, traces = counted(lambda d: d[next(iter(d))] * len(repr(next(iter(d)))))
    x = jnp.ones(1)
    np.testing.assert_allclose(jitted({1: x}), 1.0)
    np.testing.assert_allclose(jitted({True: x}), 4.0)
    np.testing.assert_allclose(jitted({1.0: x}), 3.0)
    assert traces() == 3


TABLE = np.ones(2, np.float32)


def reads_table(x):
    return x * TABLE


def test_a_global_array_changed_in_place_retraces():
    jitted, traces = counted(lambda x, f: f(x))
    x = jnp.ones(2, jnp.float32)
    np.testing.assert_allclose(jitted(x, reads_table), 1.0)
    TABLE[0] = 3.0
    try:
        np.testing.assert_allclose(jitted(x, reads_table), [3.0, 1.0])
    finally:
        TABLE[0] = 1.0
    assert traces() == 2


def test_the_key_memo_forgets_dead_objects():
    import gc

    from eqxstable._keys import _memo

    gc.collect()
    before = len(_memo.memo)
    fs = [(lambda v: lambda x: x * v)(float(i)) for i in range(200)]
    keys = [es.stable_key(g) for g in fs]
    assert len(_memo.memo) >= before + 200 and len(set(keys)) == 200
    del fs
    gc.collect()
    assert len(_memo.memo) <= before + 5


class _Scaled(eqx.Module):
    w: Any
    act: Any = eqx.field(static=True)

    def __call__(self, x):
        return self.act(self.w * x)


def _adder(c):
    return lambda v: v + c


@pytest.mark.counts_traces
@settings(max_examples=10, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.0, 2.5]), min_size=2, max_size=5))
def test_a_rebuilt_modules_static_lambda_shares_its_program(constants):
    """A module rebuilt with a fresh, equivalent lambda in an `eqx.field(static=True)` is a hit:
    its node data is keyed by value, not by the `PyTreeDef`'s `==`, which compares the lambda by
    identity. A lambda over another constant is traced again, and each call answers with its own."""
    traces = 0

    def body(m, x):
        nonlocal traces
        traces += 1
        return m(x)

    f = es.filter_jit(body)
    x = jnp.ones(2)
    for i, c in enumerate(constants):
        out = f(_Scaled(jnp.asarray(float(i + 1)), _adder(c)), x)
        np.testing.assert_array_equal(np.asarray(out), np.full(2, float(i + 1) + c, np.float32))
    distinct = {(c, np.signbit(c)) for c in constants}
    assert traces == len(distinct)
    assert f.cache_info().traces == len(distinct)
