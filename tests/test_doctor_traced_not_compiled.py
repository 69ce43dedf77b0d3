"""What only traces is no compile: `jax.eval_shape` and `jax.make_jaxpr` of a lambda rebuilt in a
loop, and eager `lax.cond`/`lax.scan` with lambda bodies, trace through JAX's tracing cache but
jit and compile none of those functions, so the doctor makes no `jax.jit` row of them and
`@pytest.mark.max_traces` does not count them (attack 13b-06); a plain `jax.jit` in the same loop
is still a row, with every compile. An `equinox.filter_jit` called only inside an outer
`jax.jit` is traced into the outer program and compiles nothing of its own (attack 13b-07)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Imported before the in-process pytest run, as in `test_pytest_plugin.py`: pytester removes the
# modules a run imported when it ends.
import eqxstable._doctor._watch  # noqa: F401
from eqxstable._compat import EXPLAINS_JIT_MISSES


ROOT = Path(__file__).parent.parent

SHAPES_ONLY = """
import jax, jax.numpy as jnp
from jax import lax

x = jnp.ones(2)
for k in range(3):
    print(jax.eval_shape(lambda: jnp.ones(2) * 3.0).shape)
    print(len(jax.make_jaxpr(lambda v: v * 2.0)(x).eqns))
    print(lax.cond(k > 0, lambda v: v + 1, lambda v: v - 1, x))
    print(lax.scan(lambda c, v: (c + v, v), 0.0, x)[0])
    print(jax.jit(lambda v: v * 4.0)(x))
"""


def _doctor(tmp_path: Path, source: str, *options: str) -> tuple[dict, str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "report.json"
    run = [sys.executable, "-m", "eqxstable", "doctor", *options]
    proc = subprocess.run(
        [*run, "--json", "--output", str(out), str(script)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.skipif(not EXPLAINS_JIT_MISSES, reason="no `jax.jit` rows on this JAX")
def test_shapes_and_eager_control_flow_are_no_jax_jit_compiles(tmp_path):
    report, _ = _doctor(tmp_path, SHAPES_ONLY)
    rows = [row for row in report["functions"] if row["jit"] == "jax"]
    # The `jax.jit` lambda alone (line 11 of the script), compiled once per rebuilt object.
    assert [row["location"].rsplit(":", 1)[-1] for row in rows] == ["11"]
    assert sum(rows[0]["misses_by_kind"].values()) == 3
    assert report["totals"]["jax_jit_misses"] == 3


def test_max_traces_does_not_count_shape_computations(pytester):
    pytester.makepyfile(
        """
import jax, jax.numpy as jnp, pytest
from jax import lax

@pytest.mark.max_traces(1)
def test_shapes_only():
    for n in range(3):
        jax.eval_shape(lambda: jnp.ones(2) * 3.0)
        jax.make_jaxpr(lambda v: v * 2.0)(jnp.ones(2))
        lax.cond(n > 0, lambda v: v + 1, lambda v: v - 1, jnp.ones(2))

@pytest.mark.max_traces(1)
def test_rebuilt_jit_still_counts():
    for n in range(3):
        jax.jit(lambda v: v * 2.0)(jnp.ones(2))
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "error", "-rN")
    if EXPLAINS_JIT_MISSES:
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["*test_rebuilt_jit_still_counts*"])
    else:
        result.assert_outcomes(passed=2)


def test_filter_jit_inside_an_outer_jit_compiles_nothing(tmp_path):
    script = (ROOT / "tests" / "doctor_scripts" / "inside_an_outer_jit.py").read_text()
    report, _ = _doctor(tmp_path, script)
    row = next(row for row in report["functions"] if row["name"] == "inner")
    assert (row["jit"], row["misses"], row["compiles"]) == ("equinox", 2, 0)
    assert report["totals"]["filter_jit_compiles"] == 0
    # Worded as a stable row's: the first call's reason says what happened instead.
    assert "no compile of this one" in row["miss_groups"][0]["reason"]
    assert not any("traced and compiled" in group["reason"] for group in row["miss_groups"])
