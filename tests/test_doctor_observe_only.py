"""Observe-only mode never runs the script's own code to key its objects (issue 21): a user's
`__getstate__` (which `pickle`-style keying would call) is refused, so the script prints and
computes exactly what it does without the doctor."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import equinox as eqx
import jax.numpy as jnp

calls = []


class Config:
    def __init__(self, n):
        self.n = n

    def __hash__(self):
        return hash(self.n)

    def __eq__(self, other):
        return type(other) is Config and other.n == self.n

    def __getstate__(self):
        calls.append(1)
        print("getstate ran")
        return {"n": self.n}

    @property
    def doubled(self):
        calls.append(2)
        return 2 * self.n


@eqx.filter_jit
def f(x, config):
    return x * config.n


total = 0.0
for _ in range(3):
    total += float(f(jnp.ones(2), Config(2)).sum())
print("total", total + len(calls), "calls", calls)
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT
    )


def test_observing_runs_none_of_the_scripts_code(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    plain = _run(str(script))
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "total 12.0 calls []\n"
    observed = _run("-m", "eqxstable", "doctor", str(script))
    assert observed.returncode == 0, observed.stderr
    assert observed.stdout == plain.stdout
    # Still counted: one row, three calls, one miss.
    row = next(line for line in observed.stderr.splitlines() if line.startswith("f "))
    assert row.split()[3:6] == ["3", "2", "1"]
