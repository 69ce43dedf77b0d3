"""A copy of a static value read back is the user's to change (attack11a finding 10): the
read-only error says "change a copy instead", so `copy.copy`, `copy.deepcopy`, `list(x)`,
`dict(x)`, `set(x)` and `np.array(x)` give plain, changeable objects of the kind assigned, while a
copy of the module itself keeps its canonical form (hashable, the same program)."""

import copy
import warnings
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


class _Stable(es.StableModule):
    tags: Any = es.field(static=True)
    widths: Any = es.field(static=True)
    table: Any = es.field(static=True)
    arr: Any = es.field(static=True)

    def __call__(self, x):
        return x * sum(self.widths[0]) + len(self.tags) + self.table["k"] + float(self.arr[1])


class _Plain(eqx.Module):
    tags: Any = eqx.field(static=True)
    widths: Any = eqx.field(static=True)
    table: Any = eqx.field(static=True)
    arr: Any = eqx.field(static=True)

    def __call__(self, x):
        return x * sum(self.widths[0]) + len(self.tags) + self.table["k"] + float(self.arr[1])


def _values(n: int) -> dict:
    return dict(tags={"a", "b"}, widths=[[n], [2]], table={"k": n}, arr=np.arange(3.0) + n)


def _stabilized(**values):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Equinox warns about lists and arrays in static fields.
        return es.stabilize(_Plain(**values))


BUILDS = pytest.mark.parametrize("build", [_Stable, _stabilized], ids=["stable", "stabilize"])
COPIES = [copy.copy, copy.deepcopy]
CHANGES = {
    "tags": lambda v: v.add("z"),
    "widths": lambda v: v.append([9]),
    "table": lambda v: v.update(z=1),
    "arr": lambda v: v.__setitem__(0, 5.0),
}
KINDS = {"tags": set, "widths": list, "table": dict, "arr": np.ndarray}
PLAIN = {"tags": set, "widths": list, "table": dict, "arr": np.array}


@BUILDS
@settings(deadline=None, max_examples=20)
@given(st.integers(0, 50), st.sampled_from(sorted(CHANGES)), st.sampled_from([0, 1, 2]))
def test_a_copy_of_a_static_value_is_the_users_to_change(build, n, name, how):
    m = build(**_values(n))
    read = getattr(m, name)
    clone = COPIES[how](read) if how < 2 else PLAIN[name](read)
    assert type(clone) is KINDS[name]
    CHANGES[name](clone)  # Changeable, as a copy of the value assigned is.
    # The module's own value is untouched, and still read-only.
    now = getattr(m, name)
    assert np.array_equal(now, _values(n)["arr"]) if name == "arr" else now == _values(n)[name]
    if build is _stabilized:
        with pytest.raises((TypeError, ValueError), match="read-only"):
            CHANGES[name](read)


@BUILDS
def test_an_inner_list_copied_on_its_own_is_the_users(build):
    m = build(**_values(1))
    inner = copy.copy(m.widths[0])
    inner.append(3)
    assert inner == [1, 3] and m.widths[0] == [1]
    assert type(copy.deepcopy(m.widths)[0]) is list


@BUILDS
@pytest.mark.counts_traces
def test_a_copy_of_the_module_keeps_its_canonical_form(build):
    traces = 0

    def run(m, x):
        nonlocal traces
        traces += 1
        return m(x)

    f = eqx.filter_jit(run)
    m = build(**_values(3))
    x = jnp.ones(2)
    expected = f(m, x)
    for clone in (copy.copy(m), copy.deepcopy(m)):
        assert (f(clone, x) == expected).all()
    assert traces == 1
