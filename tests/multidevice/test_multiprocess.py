"""Two JAX processes (`jax.distributed` over 127.0.0.1, 2 CPU devices each) train with the stable
`filter_jit` on a data-sharded global batch, rebuilding the model every step. Each process must
compile once, agree with the other on `cache_info()`, and end with the single-process answer.

The processes run `tests/multidevice/_worker.py`; this test computes the single-process answer with
the same training code in its own process.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ._worker import train


NUM_PROCESSES = 2
STEPS = 4
# Both workers together normally finish in a few seconds; this only bounds a hang (a worker that
# waits forever for a peer that died).
TIMEOUT_SECONDS = 120
_ROOT = Path(__file__).resolve().parents[2]
_STDERR_TAIL = 3000


def _free_port() -> int:
    # The port is free when we ask; the coordinator binds it a moment later. Another process
    # could take it in between, which would fail the test loudly rather than hang it.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # The test process itself runs with 8 fake devices; each worker gets 2 of its own.
    flags = [
        flag
        for flag in env.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    env["XLA_FLAGS"] = " ".join([*flags, "--xla_force_host_platform_device_count=2"])
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    return env


def _describe(outputs: list[tuple[int | None, str, str]]) -> str:
    return "\n".join(
        f"--- worker {i} (exit status {rc}) stdout:\n{out[-_STDERR_TAIL:]}\n"
        f"--- worker {i} stderr:\n{err[-_STDERR_TAIL:]}"
        for i, (rc, out, err) in enumerate(outputs)
    )


def _run_workers(tmp_path: Path) -> list[dict]:
    port = _free_port()
    env = _worker_env()
    procs: list[subprocess.Popen] = []
    files = []
    try:
        for i in range(NUM_PROCESSES):
            # Files, not pipes: a worker blocked on a full pipe while its peer waits for it in
            # a collective would hang both.
            out = open(tmp_path / f"worker{i}.out", "w+")
            err = open(tmp_path / f"worker{i}.err", "w+")
            files += [out, err]
            command = [sys.executable, "-m", "tests.multidevice._worker"]
            command += [str(i), str(NUM_PROCESSES), str(port), str(STEPS)]
            procs.append(subprocess.Popen(command, cwd=_ROOT, env=env, stdout=out, stderr=err))
        deadline = time.monotonic() + TIMEOUT_SECONDS
        timed_out = False
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        # Always: a worker left behind would hold the port and two CPU devices' worth of threads.
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait()
        for f in files:
            f.flush()
    outputs = []
    for i, proc in enumerate(procs):
        out = (tmp_path / f"worker{i}.out").read_text()
        err = (tmp_path / f"worker{i}.err").read_text()
        outputs.append((proc.returncode, out, err))
    for f in files:
        f.close()
    if timed_out:
        pytest.fail(f"the workers did not finish in {TIMEOUT_SECONDS} s:\n{_describe(outputs)}")
    if any(rc != 0 for rc, _, _ in outputs):
        pytest.fail(f"a worker failed:\n{_describe(outputs)}")
    results = []
    for rc, out, err in outputs:
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert len(lines) == 1, _describe(outputs)
        results.append(json.loads(lines[0].removeprefix("RESULT ")))
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The two workers' results; one run serves every test in this file."""
    return _run_workers(tmp_path_factory.mktemp("workers"))


def test_two_processes_compile_once_and_match_one_process(results: list[dict]):
    expected = train(STEPS)
    assert expected["traces"] == 1
    assert expected["cache_info"] == [STEPS - 1, 1, None, 1]

    for i, result in enumerate(results):
        assert result["process_index"] == i
        assert result["process_count"] == NUM_PROCESSES
        assert result["local_device_count"] == 2
        assert result["device_count"] == 2 * NUM_PROCESSES
        # Three witnesses that the rebuilt model compiled once per process: the trace counter in
        # the step's body, JAX's compile log, and the wrapper's own accounting.
        assert result["traces"] == 1
        assert result["compiles"] == 1
        assert result["cache_info"] == [STEPS - 1, 1, None, 1]
        assert result["misses"] == ["first"]
        # The parameters stay on the global mesh, replicated.
        assert "'data': 4" in result["weight_sharding"]
        assert "P(None, None)" in result["weight_sharding"]
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
