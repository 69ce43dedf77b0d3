"""Two JAX processes (`jax.distributed` over 127.0.0.1, 2 CPU devices each) train with the stable
`filter_jit` on a data-sharded global batch, rebuilding the model every step. Each process must
compile once, agree with the other on `cache_info()`, and end with the single-process answer.

The processes run `tests/multidevice/_worker.py`; this test computes the single-process answer with
the same training code in its own process.
"""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from ._launch import describe, run_processes
from ._worker import train


NUM_PROCESSES = 2
STEPS = 4


def _worker_command(process_id: int, port: int) -> list[str]:
    args = [str(process_id), str(NUM_PROCESSES), str(port), str(STEPS)]
    return [sys.executable, "-m", "tests.multidevice._worker", *args]


def _run_workers(tmp_path: Path) -> list[dict]:
    finished = run_processes(_worker_command, NUM_PROCESSES, tmp_path)
    results = []
    for f in finished:
        lines = [line for line in f.stdout.splitlines() if line.startswith("RESULT ")]
        assert len(lines) == 1, describe(finished)
        results.append(json.loads(lines[0].removeprefix("RESULT ")))
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The two workers' results; one run serves every test in this file."""
    return _run_workers(tmp_path_factory.mktemp("workers"))


def test_two_processes_compile_once_and_match_one_process(results: list[dict]):
    expected = train(STEPS)
    assert expected["traces"] == 1
    assert expected["cache_info"] == [STEPS - 1, 1, 4096, 1]

    for i, result in enumerate(results):
        assert result["process_index"] == i
        assert result["process_count"] == NUM_PROCESSES
        assert result["local_device_count"] == 2
        assert result["device_count"] == 2 * NUM_PROCESSES
        # Three witnesses that the rebuilt model compiled once per process: the trace counter in
        # the step's body, JAX's compile log, and the wrapper's own accounting.
        assert result["traces"] == 1
        assert result["compiles"] == 1
        assert result["cache_info"] == [STEPS - 1, 1, 4096, 1]
        assert result["misses"] == ["first"]
        # The parameters stay on the global mesh, replicated.
        assert "'data': 4" in result["weight_sharding"]
        # JAX 0.5 writes a replicated spec as `PartitionSpec()`.
        assert re.search(r"P\(None, None\)|spec=PartitionSpec\(\)", result["weight_sharding"])
        np.testing.assert_allclose(result["losses"], expected["losses"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result["weight"], expected["weight"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result["bias"], expected["bias"], rtol=1e-5, atol=1e-6)

    assert results[0]["cache_info"] == results[1]["cache_info"]
    # Both processes computed the same global values, to the bit.
    assert results[0]["losses"] == results[1]["losses"]
    assert results[0]["weight"] == results[1]["weight"]


def test_report_names_the_process(results: list[dict]):
    for i, result in enumerate(results):
        first, *rest = result["report"].splitlines()
        assert first.startswith(f"process {i} of {NUM_PROCESSES} ")
        assert "this process's own" in first
        (row,) = [line for line in rest if "train_step" in line]
        assert row.split()[1:4] == [str(STEPS), str(STEPS - 1), "1"]
    # Without `jax.distributed` the report has no process line.
    assert train(1)["report"].splitlines()[0].startswith("function")
