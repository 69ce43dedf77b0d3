"""Launches one command per process of a `jax.distributed` run on this machine, bounded in time,
and always cleans up: the helper behind `test_multiprocess.py` and `test_scaling_docs.py`."""

import os
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest


ROOT = Path(__file__).resolve().parents[2]
# The workers normally finish in a few seconds; this only bounds a hang (a process that waits
# forever for a peer that died).
TIMEOUT_SECONDS = 120
_TAIL = 3000


class Finished(NamedTuple):
    returncode: int | None
    stdout: str
    stderr: str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    # The coordinator binds it a moment later. Another process could take it in between, which
    # fails the run loudly (the workers cannot connect) rather than hanging it.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(devices_per_process: int) -> dict[str, str]:
    """This process's environment, with XLA faking `devices_per_process` CPU devices."""
    env = dict(os.environ)
    # The test process itself runs with 8 fake devices; each worker gets its own number.
    flags = [
        flag
        for flag in env.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    flags.append(f"--xla_force_host_platform_device_count={devices_per_process}")
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def describe(finished: Sequence[Finished]) -> str:
    """Every process's exit status and the tails of its output, for a failure message."""
    return "\n".join(
        f"--- process {i} (exit status {f.returncode}) stdout:\n{f.stdout[-_TAIL:]}\n"
        f"--- process {i} stderr:\n{f.stderr[-_TAIL:]}"
        for i, f in enumerate(finished)
    )


def run_processes(
    command: Callable[[int, int], list[str]],
    num_processes: int,
    tmp_path: Path,
    devices_per_process: int = 2,
) -> list[Finished]:
    """Runs `command(process_id, port)` once per process id, all at once, from the repository
    root, and waits for all of them.

    **Arguments:**

    - `command`: the command line of one process, given its id and the coordinator's port.
    - `num_processes`: how many processes.
    - `tmp_path`: where their output files go.
    - `devices_per_process`: how many CPU devices XLA fakes in each.

    **Returns:** one `Finished` per process. Fails the test (with every process's output) if any
    of them did not finish within `TIMEOUT_SECONDS` or exited with a non-zero status.
    """
    port = free_port()
    env = worker_env(devices_per_process)
    procs: list[subprocess.Popen] = []
    paths = [
        (tmp_path / f"process{i}.out", tmp_path / f"process{i}.err") for i in range(num_processes)
    ]
    timed_out = False
    try:
        for i, (out_path, err_path) in enumerate(paths):
            # Files, not pipes: a process blocked on a full pipe while its peer waits for it in
            # a collective would hang both.
            with open(out_path, "w") as out, open(err_path, "w") as err:
                procs.append(
                    subprocess.Popen(command(i, port), cwd=ROOT, env=env, stdout=out, stderr=err)
                )
        deadline = time.monotonic() + TIMEOUT_SECONDS
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        # Always, also when this test is interrupted: a process left behind would keep the
        # port and its peer waiting.
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait()
    finished = [
        Finished(proc.returncode, out_path.read_text(), err_path.read_text())
        for proc, (out_path, err_path) in zip(procs, paths)
    ]
    if timed_out:
        pytest.fail(f"the processes did not finish in {TIMEOUT_SECONDS} s:\n{describe(finished)}")
    if any(f.returncode != 0 for f in finished):
        pytest.fail(f"a process failed:\n{describe(finished)}")
    return finished
