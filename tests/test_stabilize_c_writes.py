"""Writes by C code into a static list, dict, set or array (`heapq.heappush`, `list.append(x,
...)`, `dict.__setitem__(d, ...)`, `set.add(s, ...)`, `np.ndarray.shape.__set__`) go past the
read-only methods of its canonical form. They must change no other module's value (as with plain
Equinox, where each module owns its list), and `jit` must never run a program traced for the old
value for it (`_module/_canonical.py`)."""

import bisect
import copy
import gc
import heapq
import random
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._module import _freezer


class M(eqx.Module):
    w: Any = eqx.field(static=True)

    def __call__(self, x):
        return x + len(self.w) + sum(self.w)


def _plain(x: Any) -> Any:
    # What a value holds as C code sees it (a set's table, not the order it iterates in).
    if isinstance(x, list):
        return ("list", [_plain(v) for v in list.__iter__(x)])
    if isinstance(x, dict):
        return ("dict", [(k, _plain(v)) for k, v in dict.items(x)])
    if isinstance(x, set):
        return ("set", sorted((type(v).__name__, v) for v in set.__iter__(x)))
    return (type(x).__name__, x)


_LIST_WRITES: list[tuple[str, Callable[[Any], Any]]] = [
    ("heapq.heappush", lambda x: heapq.heappush(x, 0)),
    ("heapq.heapify", heapq.heapify),
    ("heapq.heappop", heapq.heappop),
    ("list.append", lambda x: list.append(x, 9)),
    ("list.__setitem__", lambda x: list.__setitem__(x, 0, 5.0)),
    ("list.__delitem__", lambda x: list.__delitem__(x, 0)),
    ("list.sort", list.sort),
    ("list.reverse", list.reverse),
    ("list.__init__", lambda x: list.__init__(x, [7, 7])),
    ("list.extend", lambda x: list.extend(x, [4])),
    ("list.insert", lambda x: list.insert(x, 0, True)),
    ("list.clear", list.clear),
    ("list.__iadd__", lambda x: list.__iadd__(x, [1])),
    ("bisect.insort", lambda x: bisect.insort(x, 2)),
    ("random.shuffle", lambda x: random.Random(0).shuffle(x)),
]
_DICT_WRITES: list[tuple[str, Callable[[Any], Any]]] = [
    ("dict.__setitem__", lambda d: dict.__setitem__(d, "k", 1)),
    ("dict.__setitem__ (same key)", lambda d: dict.__setitem__(d, "a", 1.0)),
    ("dict.update", lambda d: dict.update(d, z=2)),
    ("dict.setdefault", lambda d: dict.setdefault(d, "s", 3)),
    ("dict.pop", lambda d: dict.pop(d, "a")),
    ("dict.popitem", dict.popitem),
    ("dict.clear", dict.clear),
    ("dict.__init__", lambda d: dict.__init__(d, q=1)),
    ("dict.__ior__", lambda d: dict.__ior__(d, {"o": 1})),
    ("dict.__delitem__", lambda d: dict.__delitem__(d, "a")),
]
_SET_WRITES: list[tuple[str, Callable[[Any], Any]]] = [
    ("set.add", lambda s: set.add(s, 9)),
    ("set.discard+add", lambda s: (set.discard(s, 1), set.add(s, 1.0))),
    ("set.update", lambda s: set.update(s, {5, 6})),
    ("set.clear", set.clear),
    ("set.pop", set.pop),
    ("set.__ior__", lambda s: set.__ior__(s, {8})),
    ("set.difference_update", lambda s: set.difference_update(s, {1})),
    ("set.__init__", lambda s: set.__init__(s, [7])),
]
_WRITES = {"list": _LIST_WRITES, "dict": _DICT_WRITES, "set": _SET_WRITES}
_VALUES = {
    "list": st.lists(st.sampled_from([1, 2, 3, 1.5, True]), min_size=1, max_size=5),
    "dict": st.dictionaries(st.sampled_from("abc"), st.sampled_from([1, 2.0, False])),
    "set": st.sets(st.sampled_from([1, 2, 3, "x"]), min_size=1, max_size=4),
}


@st.composite
def _cases(draw: Any) -> tuple[str, Any, tuple[str, Callable], int]:
    kind = draw(st.sampled_from(sorted(_WRITES)))
    value = draw(_VALUES[kind])
    return kind, value, draw(st.sampled_from(_WRITES[kind])), draw(st.integers(2, 3))


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except (TypeError, ValueError, IndexError, KeyError) as e:
        return ("raised", type(e))


@settings(deadline=None, max_examples=200)
@given(_cases())
def test_a_c_level_write_changes_no_other_module(case):
    """Differential against plain Equinox (each module owns its value: the eager answer)."""
    kind, value, (name, write), n = case
    mine = [M(copy.deepcopy(value)) for _ in range(n)]  # Plain Equinox, no jit.
    ours = [es.stabilize(M(copy.deepcopy(value))) for _ in range(n)]
    got = _outcome(lambda: write(ours[0].w))
    if got[0] == "ok":
        expected = _outcome(lambda: write(mine[0].w))
        assert expected[0] == "ok"
        if name == "set.pop":  # Which item goes depends on the table's layout.
            assert set.__len__(ours[0].w) == len(mine[0].w)
        else:
            assert _plain(ours[0].w) == _plain(mine[0].w)
    for theirs, reference in zip(ours[1:], mine[1:]):
        assert _plain(theirs.w) == _plain(reference.w) == _plain(value)
        assert theirs.w == ours[1].w and hash(theirs.w) == hash(ours[1].w)
    if got[0] == "ok" and _plain(ours[0].w) != _plain(value):
        # Changed: no longer of its class (JAX's cache asks `==`), and it cannot be hashed.
        assert ours[0].w != ours[1].w and not (ours[0].w == ours[1].w)
        with pytest.raises(TypeError, match=r"`tree.w`.*changed in place.*Change a copy"):
            hash(ours[0].w)


def _counting(jit: Callable) -> tuple[Callable, list[int]]:
    traces = [0]

    @jit
    def f(m, x):
        traces[0] += 1
        return m(x)

    return f, traces


@pytest.mark.counts_traces
@pytest.mark.parametrize("jit", [eqx.filter_jit, es.filter_jit], ids=["eqx", "es"])
def test_jit_shares_programs_and_retraces_a_written_module(jit):
    f, traces = _counting(jit)
    a, b = es.stabilize(M([3, 1, 2])), es.stabilize(M([3, 1, 2]))
    x = jnp.zeros(())
    assert float(f(b, x)) == 9.0 and float(f(a, x)) == 9.0 and traces[0] == 1  # One program.
    heapq.heappush(a.w, 10)  # `a`'s own list (the cache holds `b`'s).
    assert list(b.w) == [3, 1, 2]
    assert float(f(a, x)) == 4 + 16 and traces[0] == 2  # Retraced with its new value.
    assert float(f(b, x)) == 9.0 and traces[0] == 2  # `b`'s program, still right for it.
    c = es.stabilize(M([3, 1, 2]))
    assert float(f(c, x)) == 9.0 and traces[0] == 2  # A rebuilt equal module: a hit.


@pytest.mark.counts_traces
def test_stable_jit_retraces_the_module_whose_program_it_holds():
    f, traces = _counting(es.filter_jit)
    a = es.stabilize(M([3, 1, 2]))
    x = jnp.zeros(())
    assert float(f(a, x)) == 9.0 and traces[0] == 1
    list.append(a.w, 10)
    assert float(f(a, x)) == 4 + 16 and traces[0] == 2  # A change that the watch sees.


@pytest.mark.xfail(
    strict=True,
    reason="Not fixable in eqxstable: plain `eqx.filter_jit` compares the static value of the very "
    "module object whose program it holds by identity (`PyObject_RichCompareBool`), and a "
    "PyTreeDef's hash leaves node data out, so no code of ours runs on that call; "
    "`es.filter_jit` retraces it (the test above)",
)
def test_plain_jit_retraces_the_module_whose_program_it_holds():
    f, traces = _counting(eqx.filter_jit)
    a = es.stabilize(M([3, 1, 2]))
    x = jnp.zeros(())
    assert float(f(a, x)) == 9.0
    list.append(a.w, 10)
    assert float(f(a, x)) == 4 + 16


def test_type_exact_values_never_share_a_program():
    f, traces = _counting(eqx.filter_jit)
    x = jnp.zeros((), jnp.int32)
    outs = [f(es.stabilize(M(v)), x) for v in ([1], [1.0], [True], [1])]
    assert traces[0] == 3
    assert [o.dtype for o in outs[:3]] == [jnp.int32, jnp.float32, jnp.int32]
    assert [type(es.stabilize(M(v)).w[0]) for v in ([1], [1.0], [True])] == [int, float, bool]


def test_nested_containers_are_each_modules_own():
    a, b = es.stabilize(M([[1, 2], {3}])), es.stabilize(M([[1, 2], {3}]))
    assert a.w == b.w and hash(a.w) == hash(b.w)
    list.append(a.w[0], 9)
    set.add(a.w[1], 4)
    assert b.w == [[1, 2], {3}] and b.w[0] == [1, 2] and 4 not in b.w[1]
    assert a.w != b.w
    with pytest.raises(TypeError, match="changed in place"):
        hash(a.w)


def test_arrays_are_each_modules_own():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Equinox warns about NumPy arrays in static fields.
        a, b = es.stabilize(M(np.arange(4.0))), es.stabilize(M(np.arange(4.0)))
        nested = [es.stabilize(M([np.arange(4.0)])) for _ in range(2)]
    assert a.w is not b.w and a.w == b.w and hash(a.w) == hash(b.w)
    np.ndarray.shape.__set__(a.w, (2, 2))  # NumPy's own descriptor, past the read-only one.
    assert b.w.shape == (4,) and a.w != b.w
    with pytest.raises(TypeError, match="changed in place"):
        hash(a.w)
    np.ndarray.shape.__set__(nested[0].w[0], (2, 2))
    assert nested[1].w[0].shape == (4,) and nested[0].w != nested[1].w


def test_a_modules_deep_copy_owns_its_values():
    a = es.stabilize(M([3, 1, 2]))
    for clone in (copy.deepcopy(a), copy.deepcopy([a])[0]):
        assert clone.w == a.w and hash(clone.w) == hash(a.w) and clone.w is not a.w
        list.append(clone.w, 9)
        assert list(a.w) == [3, 1, 2]


def test_one_token_per_class_and_none_left_behind():
    modules = [es.stabilize(M([1, 2, 3, 4, 5, 6, 7])) for _ in range(50)]
    assert len({id(m.w._token) for m in modules}) == 1 and len({id(m.w) for m in modules}) == 50
    key = modules[0].w._token.key
    assert _freezer._forms[key] is modules[0].w._token
    token = weakref.ref(modules[0].w._token)
    del modules
    gc.collect()
    assert token() is None and key not in _freezer._forms


def test_intern_never_hands_out_another_modules_value():
    a, b = es.stabilize(M([3, 1, 2])), es.stabilize(M([3, 1, 2]))
    assert es.intern(b.w) is b.w and es.intern(a.w) is a.w
    assert es.stable_key(a.w) == es.stable_key(b.w)
    list.append(a.w, 9)
    assert es.stable_key(a.w) != es.stable_key(b.w)


def test_stable_module_sets_are_each_modules_own():
    class S(es.StableModule):
        s: set = eqx.field(static=True)

    x, y = S({1, 2}), S({1, 2})
    set.add(x.s, 9)
    assert set(set.__iter__(y.s)) == {1, 2} and 9 not in y.s
    with pytest.raises(TypeError, match=r"`S.s` was changed in place.*\{1, 2, 9\}"):
        x.s


def test_intern_never_hands_out_a_module_holding_another_modules_value():
    class Outer(eqx.Module):
        inner: Any = eqx.field(static=True)

    a, b = es.stabilize(Outer(M([3, 1, 2]))), es.stabilize(Outer(M([3, 1, 2])))
    assert a.inner.w is not b.inner.w and a == b
    list.append(a.inner.w, 9)
    assert list(b.inner.w) == [3, 1, 2]
    assert es.intern((b.inner.w,))[0] is b.inner.w
