"""A NumPy object array in a static field (CONTRACT section 1: "NumPy values copied at
interning"; section 2: a static value behaves as assigned, and a module is safe under plain
`equinox.filter_jit`).

A copy of an object array shares its items. Its items are therefore frozen like any other
static value's, so a list that the user keeps and changes later is not what the module computes
with: eager calls, plain `eqx.filter_jit` and `es.filter_jit` all agree on the value assigned.
"""

import warnings
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


class Table(es.StableModule):
    table: Any = eqx.field(static=True)

    def __call__(self, x):
        return x * self.table[0][0]


class PlainTable(eqx.Module):
    table: Any = eqx.field(static=True)

    def __call__(self, x):
        return x * self.table[0][0]


def _object_array(row: list) -> np.ndarray:
    a = np.empty(1, dtype=object)
    a[0] = row
    return a


def _stabilized(a: np.ndarray) -> Any:
    with warnings.catch_warnings():
        # Equinox's own warning for a NumPy array in a static field of a plain module.
        warnings.filterwarnings("ignore", "A JAX array is being set as static")
        plain = PlainTable(a)
    return es.stabilize(plain)


# Float32 values without subnormals: XLA's CPU flushes a float32 subnormal to zero in `x * v`, in
# eager calls and traced ones alike, so the expected `np.float32(before)` would not be the answer.
finite = st.floats(-1e3, 1e3, allow_nan=False, width=32, allow_subnormal=False)
_run_eqx = eqx.filter_jit(lambda m, x: m(x))
_run_es = es.filter_jit(lambda m, x: m(x))


@settings(deadline=None, max_examples=15)
@given(finite, finite)
def test_changing_a_list_held_by_an_object_array_changes_no_module(before, after):
    x = jnp.ones(())
    run_eqx, run_es = _run_eqx, _run_es
    for build in (Table, _stabilized):
        row = [before]
        module = build(_object_array(row))
        results = [float(module(x)), float(run_eqx(module, x)), float(run_es(module, x))]
        row[0] = after
        if build is Table and np.float64(before).tobytes() != np.float64(after).tobytes():
            # The module cannot follow the list it was given: its next read says so.
            with pytest.raises(TypeError, match=r"`Table\.table\.flat\[0\]`: the list given"):
                module(x)
        else:
            results.append(float(module(x)))  # `es.stabilize` took a snapshot.
        # The module `jit` rebuilds from the PyTree for its trace is not checked (documented).
        results += [float(run_eqx(module, x)), float(run_es(module, x))]
        assert results == [np.float32(before)] * len(results)


def test_an_object_arrays_lists_read_back_read_only():
    row = [1.0]
    module = Table(_object_array(row))
    got = module.table
    assert isinstance(got, np.ndarray) and got.dtype == object and not got.flags.writeable
    assert got[0] == [1.0] and isinstance(got[0], list)
    with pytest.raises(TypeError, match="read-only"):
        got[0].append(2.0)
    assert row == [1.0]
