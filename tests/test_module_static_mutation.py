"""A `StableModule`'s static list or dict reads back as one plain copy per module and field, and a
change made to that copy in place is refused by the next read (`eqxstable/_module/_handed.py`):
a change is never silently lost, and reads that change nothing behave as a plain list or dict."""

import copy
import dataclasses
import gc
import pickle
import struct
import weakref
from typing import Any

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import pytest
from hypothesis import given

import eqxstable as es
from eqxstable._module import _handed
from eqxstable._module._canonical import CanonicalList

from .helpers import counting_filter_jit


class M(es.StableModule):
    widths: list = eqx.field(static=True)
    cfg: dict = eqx.field(static=True)
    weight: jax.Array = eqx.field(default_factory=lambda: jnp.ones(2))


def _changed(field: str) -> Any:
    return pytest.raises(TypeError, match=rf"`M\.{field}(\[[^`]*)?` was changed in place")


def _sort(w: list) -> None:
    w.sort()


def _iadd(w: list) -> None:
    w += [4]


def _imul(w: list) -> None:
    w *= 2


def _delitem(w: list) -> None:
    del w[0]


@pytest.mark.parametrize(
    "change",
    [
        lambda w: w.append(4),
        lambda w: w.__setitem__(0, 5),
        lambda w: w.extend([4, 5]),
        lambda w: w.pop(),
        lambda w: w.clear(),
        lambda w: w.insert(0, 1),
        lambda w: w.remove(3),
        lambda w: w.reverse(),
        _sort,
        _iadd,
        _imul,
        _delitem,
    ],
)
def test_a_changed_list_is_refused_by_the_next_read(change):
    m = M([3, 2], {"lr": 1.0})
    widths = m.widths
    change(widths)
    with _changed("widths"):
        m.widths  # noqa: B018
    with _changed("widths"):  # Every later read, not only the first.
        m.widths  # noqa: B018
    assert m.cfg == {"lr": 1.0}  # The other field is unaffected.


def _del_key(d: dict) -> None:
    del d["lr"]


def _reorder(d: dict) -> None:
    d["lr"] = d.pop("lr")  # The same items, in another order (iteration shows it).


def _ior(d: dict) -> None:
    d |= {"x": 1}


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.__setitem__("lr", 0.1),
        lambda d: d.__setitem__("new", 1),
        lambda d: d.pop("lr"),
        lambda d: d.popitem(),
        lambda d: d.clear(),
        lambda d: d.update(lr=2.0),
        lambda d: d.setdefault("new", 0),
        _del_key,
        _reorder,
        _ior,
    ],
)
def test_a_changed_dict_is_refused_by_the_next_read(change):
    m = M([2, 3], {"lr": 1.0, "n": 2})
    cfg = m.cfg
    change(cfg)
    with _changed("cfg"):
        m.cfg  # noqa: B018


@pytest.mark.parametrize(
    "new",
    [1.0, True, 1 + 0j, "1"],
)
def test_an_item_replaced_by_an_equal_one_of_another_type_is_a_change(new):
    m = M([1, 2], {"lr": 0.0})
    m.widths[0] = new
    with pytest.raises(TypeError, match=r"`M\.widths\[0\]` was changed in place"):
        m.widths  # noqa: B018
    m.cfg["lr"] = -0.0  # `==` to 0.0, but another float.
    with pytest.raises(TypeError, match=r"`M\.cfg\['lr'\]` was changed in place"):
        m.cfg  # noqa: B018


def test_nested_changes_name_the_place_and_say_the_fix():
    m = M([[1, 2], {"a": [3]}], {"k": [1], "t": (1, [2])})
    m.cfg["k"].append(2)
    with pytest.raises(TypeError) as info:
        m.cfg  # noqa: B018
    message = str(info.value)
    assert "`M.cfg['k']` was changed in place" in message
    assert "3 items" not in message and "2 items, not 1" in message
    assert "dataclasses.replace(module, cfg=...)" in message and "static" in message
    m2 = M([[1, 2], {"a": [3]}], {"k": [1], "t": (1, [2])})
    m2.cfg["t"][1][0] = 5  # A list inside a tuple inside the dict.
    with pytest.raises(TypeError, match=r"`M\.cfg\['t'\]\[1\]\[0\]` was changed in place"):
        m2.cfg  # noqa: B018
    m2.widths[1]["a"].pop()
    with pytest.raises(TypeError, match=r"`M\.widths\[1\]\['a'\]` was changed in place"):
        m2.widths  # noqa: B018


def test_a_change_undone_or_to_an_equal_value_passes():
    m = M([1000, 2.5], {"lr": 1.0})
    widths = m.widths
    widths.append(4)
    widths.pop()
    widths[0] = int("1000")  # Another int object, of the same type and value.
    widths[1] = float("2.5")
    assert m.widths is widths and m.widths == [1000, 2.5]
    assert type(m.widths[1]) is float


def test_reads_without_a_change_behave_as_a_plain_list_and_dict():
    m = M([2, 3], {"lr": 1.0, "n": [1]})
    assert m.widths is m.widths and m.cfg is m.cfg  # One copy per module and field.
    assert type(m.widths) is list and type(m.cfg) is dict and type(m.cfg["n"]) is list
    assert m.widths == [2, 3] and m.cfg == {"lr": 1.0, "n": [1]} and list(m.cfg) == ["lr", "n"]
    assert jax.tree.map(lambda a, b: a + b, m.widths, [1, 1]) == [3, 4]
    assert jax.tree.structure(m.cfg) == jax.tree.structure({"lr": 0, "n": [0]})
    assert copy.deepcopy(m.widths) == [2, 3] and pickle.loads(pickle.dumps(m.cfg)) == m.cfg
    assert m.widths == [2, 3]  # Still unchanged after being copied.


def test_reading_changes_neither_the_pytree_nor_the_instance_dict():
    m = M([2, 3], {"lr": 1.0})
    before = jax.tree.structure(m), dict(m.__dict__)
    assert m.widths and m.cfg
    # Equinox's flatten counts `__dict__`'s entries: an entry there would change the treedef.
    assert jax.tree.structure(m) == before[0] and m.__dict__ == before[1]
    assert jax.tree.structure(m) == jax.tree.structure(M([2, 3], {"lr": 1.0}))


@pytest.mark.parametrize(
    "clone",
    [
        copy.copy,
        copy.deepcopy,
        lambda m: pickle.loads(pickle.dumps(m)),
        lambda m: jax.tree.unflatten(*reversed(jax.tree.flatten(m))),
        lambda m: eqx.tree_at(lambda m: m.weight, m, jnp.zeros(2)),
    ],
)
def test_a_module_made_from_another_has_its_own_copies(clone):
    m = M([2, 3], {"lr": 1.0})
    widths = m.widths
    other = clone(m)
    assert other.widths is not widths and other.widths == [2, 3]
    widths.append(4)  # The original's copy only: the clone reads the module's value.
    assert other.widths == [2, 3] and other.widths is other.widths
    with _changed("widths"):
        m.widths  # noqa: B018


def test_dataclasses_replace_builds_a_module_with_the_new_value():
    m = M([2, 3], {"lr": 1.0})
    m.widths.append(4)
    with pytest.raises(TypeError, match=r"dataclasses\.replace"):
        m.widths  # noqa: B018
    new = dataclasses.replace(m, widths=[2, 3, 4])
    assert new.widths == [2, 3, 4] and type(new.widths) is list


def test_the_table_holds_no_module_alive():
    m = M([2, 3], {"lr": 1.0})
    m.widths  # noqa: B018
    assert id(m) in _handed._handed
    ref, key = weakref.ref(m), id(m)
    del m
    gc.collect()
    assert ref() is None and key not in _handed._handed


@pytest.mark.counts_traces
def test_reads_inside_a_trace_work_and_rebuilt_modules_share_a_program():
    run, traces = counting_filter_jit(lambda m, x: x * len(m.widths) + m.cfg["lr"])
    for _ in range(3):
        assert run(M([2, 3], {"lr": 1.0}), jnp.ones(())) == 3.0
    assert traces() == 1


def test_a_stabilized_plain_module_refuses_a_change_at_once():
    class Plain(eqx.Module):
        widths: list = eqx.field(static=True)

    m = es.stabilize(Plain([2, 3]))
    assert isinstance(m.widths, CanonicalList)  # Read-only: it refuses the change itself.
    with pytest.raises(TypeError, match="read-only"):
        m.widths.append(4)


# A value: nested lists and dicts of atoms of several types, some equal across types.
_atoms = st.one_of(
    st.integers(-3, 3), st.booleans(), st.floats(-2, 2, width=16), st.sampled_from(["a", "b"])
)
_values = st.recursive(
    _atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from("abcd"), inner, max_size=4)
    ),
    max_leaves=12,
)


def _containers(x: Any) -> list:
    found = [x] if type(x) in (list, dict) else []
    for item in x.values() if type(x) is dict else x if type(x) is list else ():
        found += _containers(item)
    return found


def _exactly_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is list:
        return len(a) == len(b) and all(map(_exactly_equal, a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(map(_exactly_equal, a.values(), b.values()))
    if type(a) is float:
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def _change(data: st.DataObject, target: Any) -> None:
    new = data.draw(_values)
    if type(target) is list:
        ops = ["append", "extend", "clear", "reverse"] + ["set", "pop"] * bool(target)
        op = data.draw(st.sampled_from(ops))
        if op == "set":
            target[data.draw(st.integers(0, len(target) - 1))] = new
        elif op == "pop":
            target.pop(data.draw(st.integers(0, len(target) - 1)))
        elif op in ("append", "extend"):
            getattr(target, op)(new if op == "append" else [new])
        else:
            getattr(target, op)()
    else:
        op = data.draw(st.sampled_from(["set", "pop", "clear", "reinsert"]))
        key = data.draw(st.sampled_from("abcde"))
        if op == "set":
            target[key] = new
        elif op == "clear":
            target.clear()
        elif key in target:
            value = target.pop(key)
            if op == "reinsert":
                target[key] = value


@given(
    st.lists(_values, max_size=4),
    st.dictionaries(st.sampled_from("xyz"), _values, max_size=3),
    st.data(),
)
def test_any_change_that_is_not_exactly_equal_is_refused(widths, cfg, data):
    m = M(copy.deepcopy(widths), copy.deepcopy(cfg))
    for name, original in (("widths", widths), ("cfg", cfg)):
        got = getattr(m, name)
        assert _exactly_equal(got, original) and getattr(m, name) is got
        targets = _containers(got)
        for _ in range(data.draw(st.integers(1, 3))):
            _change(data, targets[data.draw(st.integers(0, len(targets) - 1))])
        if _exactly_equal(got, original):
            assert getattr(m, name) is got
        else:
            with _changed(name):
                getattr(m, name)
