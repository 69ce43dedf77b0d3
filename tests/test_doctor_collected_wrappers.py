"""The doctor reports the script's own `eqxstable.filter_jit` wrappers that are gone by the time
it writes its report (attack 14b-01): a function-local wrapper that traced twice was reported as
"No `filter_jit` or `jax.jit` function was called", where the same script with
`equinox.filter_jit`, or under `--stabilize`, showed its two misses."""

import json
import textwrap

import pytest

from .helpers import run_doctor


SCRIPT = """
import gc
import jax.numpy as jnp
import {module} as jit_lib

def work():
    @jit_lib.filter_jit
    def f(x):
        return x * 2

    f(jnp.ones(1))
    f(jnp.ones(2))
    f(jnp.ones(2))

work()
gc.collect()
"""


@pytest.mark.parametrize("module", ["eqxstable", "equinox"])
@pytest.mark.parametrize("options", [(), ("--stabilize",)])
def test_a_wrapper_gone_before_the_report_is_reported(tmp_path, module, options):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT.format(module=module)))
    out = tmp_path / "report.json"
    proc = run_doctor(*options, "--json", "--output", out, script)
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in json.loads(out.read_text())["functions"] if r["name"].endswith("f")]
    assert len(rows) == 1, rows
    assert (rows[0]["calls"], rows[0]["misses"]) == (3, 2)
