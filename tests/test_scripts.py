"""The shell scripts behind the README's commands do what their comments say.

`scripts/test.sh` is run with a stand-in `python3` first on `PATH` that records its arguments and
exits with a chosen status, so that what the script does with each pytest's outcome is seen
without running the suite.
"""

import os
import subprocess
from pathlib import Path

import pytest


ROOT = Path(__file__).parent.parent


def _test_sh(tmp_path: Path, statuses: tuple[int, int]) -> tuple[int, list[str]]:
    log = tmp_path / "calls.log"
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    # The n-th call exits with the n-th status.
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> "{log}"\n'
        f'n=$(wc -l < "{log}")\n'
        f"statuses=({statuses[0]} {statuses[1]})\n"
        'exit "${statuses[$((n - 1))]}"\n'
    )
    fake.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "test.sh"), "-q"],
        env=dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, log.read_text().splitlines()


@pytest.mark.parametrize("statuses", [(0, 0), (1, 0), (0, 1), (5, 0), (1, 1)])
def test_test_sh_runs_both_halves_and_fails_if_either_does(tmp_path: Path, statuses):
    status, calls = _test_sh(tmp_path, statuses)
    assert calls == [
        "-m pytest -m not multidevice -q tests",
        "-m pytest -m multidevice -q tests",
    ]
    assert (status == 0) == (statuses == (0, 0))
