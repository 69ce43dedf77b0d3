"""A `StableModule` built over an object that was changed since an earlier module was built
over it (CONTRACT sections 1 and 2: the same changeable object is keyed by its identity *and*
what it holds now; a module rebuilt from *equivalent* parts hits plain `eqx.filter_jit`).

A static field's canonical form (`_static.Static`) is what plain `eqx.filter_jit` compares, by
identity. A changeable object that it keeps by reference (anything but a list, dict, set or
NumPy value, which are copied read-only) must therefore give a new canonical form once it holds
something else: the module built over it afterwards reads the new contents, and must not be
handed the program traced for the old ones.
"""

import array
import collections
import types
import warnings
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es
from eqxstable._keys import _context

from .helpers import counting_filter_jit


class Box(es.StableModule):
    v: Any = eqx.field(static=True)


class _Obj:
    """A plain user object: identity equality, attributes that change."""

    def __init__(self, n: float):
        self.n = n


class _DictSub(dict):
    pass


class _ListSub(list):
    pass


class _SetSub(set):
    pass


# (name, make, change in place, read as a number). Each change makes `read` give another number.
KINDS: list[tuple[str, Callable[[], Any], Callable[[Any], None], Callable[[Any], float]]] = [
    (
        "OrderedDict",
        lambda: collections.OrderedDict(a=1.0, b=2),
        lambda d: d.__setitem__("c", 5),
        lambda d: sum(d.values()),
    ),
    (
        "OrderedDict.move_to_end",
        lambda: collections.OrderedDict(a=1.0, b=2),
        lambda d: d.move_to_end("a"),
        lambda d: list(d.values())[0],
    ),
    (
        "defaultdict",
        lambda: collections.defaultdict(int, a=1),
        lambda d: d.__setitem__("b", 4),
        lambda d: sum(d.values()),
    ),
    (
        "Counter",
        lambda: collections.Counter(a=1),
        lambda d: d.update(a=2),
        lambda d: d["a"],
    ),
    (
        "ChainMap",
        lambda: collections.ChainMap({"a": 1}),
        lambda d: d.maps.insert(0, {"a": 7}),
        lambda d: d["a"],
    ),
    ("deque", lambda: collections.deque([1, 2]), lambda d: d.append(4), sum),
    (
        "UserDict",
        lambda: collections.UserDict(a=1),
        lambda d: d.__setitem__("a", 3),
        lambda d: d["a"],
    ),
    ("UserList", lambda: collections.UserList([1, 2]), lambda d: d.append(4), sum),
    ("dict subclass", lambda: _DictSub(a=1), lambda d: d.__setitem__("a", 3), lambda d: d["a"]),
    ("list subclass", lambda: _ListSub([1, 2]), lambda d: d.append(4), sum),
    ("set subclass", lambda: _SetSub({1, 2}), lambda d: d.add(4), sum),
    ("bytearray", lambda: bytearray(b"\x01\x02"), lambda d: d.append(4), sum),
    ("array.array", lambda: array.array("d", [1.0, 2.0]), lambda d: d.append(4.0), sum),
    ("set", lambda: {1, 2}, lambda d: d.add(4), sum),
    ("list", lambda: [1, 2], lambda d: d.append(4), sum),
    ("dict", lambda: {"a": 1}, lambda d: d.__setitem__("a", 3), lambda d: d["a"]),
    ("user object", lambda: _Obj(1.0), lambda o: setattr(o, "n", 3.0), lambda o: o.n),
    (
        "SimpleNamespace",
        lambda: types.SimpleNamespace(n=1.0),
        lambda o: setattr(o, "n", 3.0),
        lambda o: o.n,
    ),
    ("list in a tuple", lambda: ([1, 2],), lambda t: t[0].append(4), lambda t: sum(t[0])),
    (
        "OrderedDict in a list",
        lambda: [collections.OrderedDict(a=1)],
        lambda t: t[0].__setitem__("a", 3),
        lambda t: t[0]["a"],
    ),
]


class PlainBox(eqx.Module):
    v: Any = eqx.field(static=True)


_PARAMS = pytest.mark.parametrize(
    ("make", "change", "read"), [k[1:] for k in KINDS], ids=[k[0] for k in KINDS]
)


@pytest.mark.counts_traces
@_PARAMS
def test_a_module_rebuilt_over_a_changed_object_is_retraced(make, change, read):
    f, traces = counting_filter_jit(lambda box, x: x * read(box.v))

    x = jnp.ones(2)
    obj = make()
    before = read(obj)
    assert float(f(Box(obj), x)[0]) == before
    change(obj)
    after = read(obj)
    assert after != before
    box = Box(obj)
    assert read(box.v) == after  # Without jit: the new module reads the new contents.
    assert float(f(box, x)[0]) == after
    assert traces() == 2


@pytest.mark.counts_traces
@_PARAMS
def test_a_stabilized_module_rebuilt_over_a_changed_object_is_retraced(make, change, read):
    # A plain module's static list, made a hashable canonical form by `es.stabilize`: the form
    # holding the changed object is another form.
    f, traces = counting_filter_jit(lambda box, x: x * read(box.v[0]))

    x = jnp.ones(2)
    obj = make()
    before = read(obj)
    assert float(f(es.stabilize(PlainBox([obj])), x)[0]) == before
    change(obj)
    after = read(obj)
    box = es.stabilize(PlainBox([obj]))
    assert read(box.v[0]) == after
    assert float(f(box, x)[0]) == after
    assert traces() == 2


# NumPy values are copied when a static field takes them (CONTRACT section 1: "NumPy values
# copied at interning"; section 2: a NumPy value reads back read-only): (name, make, change in
# place, read as a number). A structured scalar (`np.void`) is a view into its array.
_RECORD = np.dtype([("a", "<f4"), ("b", "<i4")])


def _records(value: float) -> np.ndarray:
    a = np.zeros(3, dtype=_RECORD)
    a["a"] = value
    return a


def _set_field(v: Any) -> None:
    v["a"] = 0.5


NUMPY_KINDS: list[tuple[str, Callable[[], Any], Callable[[Any], None], Callable[[Any], float]]] = [
    ("np.void of an array", lambda: _records(1.0)[0], _set_field, lambda v: float(v["a"])),
    (
        "np.void of a 0-d array",
        lambda: _records(1.0)[:1].reshape(())[()],
        _set_field,
        lambda v: float(v["a"]),
    ),
    ("structured array", lambda: _records(1.0), _set_field, lambda v: float(v["a"].sum())),
    (
        "0-d structured array",
        lambda: _records(1.0)[0:1].reshape(()),
        _set_field,
        lambda v: float(v["a"]),
    ),
    ("0-d array", lambda: np.array(1.0), lambda v: v.fill(0.5), lambda v: float(v)),
    ("view", lambda: np.arange(6.0)[1:4], lambda v: v.fill(0.5), lambda v: float(v.sum())),
    (
        "strided view",
        lambda: np.arange(6.0)[::2],
        lambda v: v.__setitem__(0, 9.0),
        lambda v: float(v.sum()),
    ),
    (
        "transposed",
        lambda: np.arange(6.0).reshape(2, 3).T,
        lambda v: v.__setitem__((0, 1), 9.0),
        lambda v: float(v[0, 1]),
    ),
    (
        "np.void in a tuple",
        lambda: (_records(1.0)[1], 2),
        lambda t: _set_field(t[0]),
        lambda t: float(t[0]["a"]),
    ),
    (
        "np.void in a list",
        lambda: [_records(1.0)[1]],
        lambda t: _set_field(t[0]),
        lambda t: float(t[0]["a"]),
    ),
]
_NUMPY_PARAMS = pytest.mark.parametrize(
    ("make", "change", "read"), [k[1:] for k in NUMPY_KINDS], ids=[k[0] for k in NUMPY_KINDS]
)


@pytest.mark.counts_traces
@_NUMPY_PARAMS
def test_a_numpy_value_is_copied_by_a_stable_module(make, change, read):
    f, traces = counting_filter_jit(lambda box, x: x * read(box.v))

    x = jnp.ones(2)
    for step in range(3):
        v = make()
        before = read(v)
        box = Box(v)
        assert read(box.v) == before
        assert float(f(box, x)[0]) == before
        change(v)  # The user changes their value after building the module.
        assert read(v) != before
        # The module holds a copy and cannot follow the change: a read says so, never the old
        # value in silence (`_module/_given.py`).
        with pytest.raises(TypeError, match=r"`Box\.v.*changed in place"):
            read(box.v)
        # A module over a fresh equal value (maybe the canonical form of the first) is right.
        assert read(Box(make()).v) == before
    # A structured array's field names can be assigned (`dtype.names = ...`), so each module
    # holds a copy of its own, never shared with another's (attack 11a-11): plain
    # `equinox.filter_jit` compiles for each rebuilt module, as for an `equinox.Module`.
    value = make()
    structured = isinstance(value, np.ndarray) and value.dtype.names is not None
    assert traces() == (3 if structured else 1)


def _stabilized(v: Any) -> Any:
    # Equinox warns about a NumPy value in a static field of its own modules.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        box = PlainBox((v,))
    return es.stabilize(box)


@pytest.mark.counts_traces
@_NUMPY_PARAMS
def test_a_numpy_value_is_copied_by_stabilize(make, change, read):
    f, traces = counting_filter_jit(lambda box, x: x * read(box.v[0]))

    x = jnp.ones(2)
    for step in range(3):
        v = make()
        before = read(v)
        box = _stabilized(v)
        change(v)
        assert read(box.v[0]) == before
        assert float(f(box, x)[0]) == before
        assert read(_stabilized(make()).v[0]) == before
    # A structured array is never shared between modules (above): a compile per rebuilt module.
    value = make()
    structured = isinstance(value, np.ndarray) and value.dtype.names is not None
    assert traces() == (3 if structured else 1)


class _Big:
    """A user object reaching more objects than a key may walk (a vocabulary, say)."""

    def __init__(self):
        self.table = [[] for _ in range(300)]
        self.n = 2.0


@pytest.mark.counts_traces
def test_an_object_too_big_to_key_keeps_one_canonical_form(monkeypatch):
    monkeypatch.setattr(_context, "MAX_OBJECTS", 200)  # As 50,000, only faster.
    # Its key equals nothing, not even its own next one: it is left to its identity (as in
    # Equinox), so rebuilding a module over the same object shares one program.
    f, traces = counting_filter_jit(lambda box, x: x * box.v.n)

    big = _Big()
    boxes = [Box(big) for _ in range(2)]
    assert boxes[0].__dict__["v"] is boxes[1].__dict__["v"]
    for box in boxes:
        assert float(f(box, jnp.ones(2))[0]) == 2.0
    assert traces() == 1
