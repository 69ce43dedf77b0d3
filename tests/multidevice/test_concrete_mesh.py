"""The concrete mesh of `jax.set_mesh` (JAX's `device_context`): JAX keys its compiled programs
by it but not its traces, so two meshes over other devices with the same abstract mesh share a
trace and compile apart. The stable cache keys entries and reused programs by it too
(`eqxstable/_jit/_config.py`): a call under the other mesh is counted as the compile it is, and a
trace that read the mesh's devices is never served under another.

`scripts/test.sh` runs this file with `XLA_FLAGS=--xla_force_host_platform_device_count=8`.
"""

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

import eqxstable as es

from ..helpers import compile_log


def _meshes():
    devices = jax.devices()
    return [
        jax.make_mesh((4,), ("x",), devices=group, axis_types=(AxisType.Explicit,))
        for group in (devices[:4], devices[4:])
    ]


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


@pytest.mark.counts_traces
def test_an_equal_trace_under_another_concrete_mesh_is_a_counted_compile():
    first_mesh, second_mesh = _meshes()
    traces = 0

    def make():
        def sharded_double(x):
            nonlocal traces
            traces += 1
            return jax.sharding.reshard(x * 2, P("x"))

        return sharded_double

    a, b = es.filter_jit(make()), es.filter_jit(make())
    x = np.arange(8.0, dtype=np.float32)
    with compile_log() as log, jax.set_mesh(first_mesh):
        first = a(x)
    assert log.count("sharded_double") == 1
    with compile_log() as log, jax.set_mesh(second_mesh):
        second = b(x)
    # JAX compiles for the other devices; the stable cache says so.
    assert log.count("sharded_double") == 1
    info = b.cache_info()
    assert (info.misses, info.traces, info.compiles) == (1, 1, 1)
    assert b.misses[0].compiled
    assert traces == 2
    np.testing.assert_array_equal(np.asarray(first), 2 * x)
    np.testing.assert_array_equal(np.asarray(second), 2 * x)
    assert {d.id for d in second.sharding.device_set} == {d.id for d in second_mesh.devices.flat}
    # Back under the first mesh, each wrapper's program is a hit.
    with compile_log() as log, jax.set_mesh(first_mesh):
        a(x)
    with jax.set_mesh(second_mesh):
        b(x)
    assert log.count("sharded_double") == 0
    assert a.cache_info().hits == b.cache_info().hits == 1


@pytest.mark.counts_traces
def test_a_trace_that_reads_the_concrete_mesh_is_not_served_under_another():
    first_mesh, second_mesh = _meshes()
    from jax._src.mesh import get_concrete_mesh  # What a trace may read (JAX's own helper).

    def make():
        def device_ids(x):
            return x + sum(d.id for d in get_concrete_mesh().devices.flat)

        return device_ids

    with jax.set_mesh(first_mesh):
        first = float(es.filter_jit(make())(np.zeros((), np.float32)))
    with jax.set_mesh(second_mesh):
        rebuilt = es.filter_jit(make())
        second = float(rebuilt(np.zeros((), np.float32)))
        eager = float(make()(np.zeros((), np.float32)))
    assert first == 0 + 1 + 2 + 3
    assert second == eager == 4 + 5 + 6 + 7
    info = rebuilt.cache_info()
    assert (info.misses, info.compiles) == (1, 1)
    # The miss names the mesh that changed (a NumPy input has no sharding to blame).
    assert "device_context" in rebuilt.misses[0].reason
