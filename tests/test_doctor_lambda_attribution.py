"""JAX names a compile by its function's name only (`jit(<lambda>)`): the doctor attributes a
compile without a trace by the jaxpr JAX compiles (its `debug_info`), so the gradient programs of
`equinox.filter_jit` lambdas are never charged to an unrelated `jax.jit` lambda, and the summary
does not call misses traced under `jax.grad` reuses of an equal program (attack 12b-07)."""

import json
import textwrap
from pathlib import Path

import pytest

from eqxstable._compat import EXPLAINS_JIT_MISSES

from .helpers import run_doctor


SCRIPT = """
import equinox as eqx, jax, jax.numpy as jnp
x = jnp.ones(3)
g = jax.jit(lambda x: x + 1)
print(g(x))
print(jax.grad(eqx.filter_jit(lambda z: (z ** 2).sum()))(x))
print(jax.grad(eqx.filter_jit(lambda z: (z ** 3).sum()))(x))
h = jax.jit(lambda x: (x ** 4).sum())
print(jax.grad(h)(x))
"""


def _doctor(tmp_path: Path, *options: str) -> tuple[dict, str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "report.json"
    proc = run_doctor(*options, "--json", "--output", out, script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1:] == ["[2. 2. 2.]", "[3. 3. 3.]", "[4. 4. 4.]"]
    words = run_doctor(*options, script)
    text = words.stdout + words.stderr
    return json.loads(out.read_text()), text


@pytest.mark.skipif(not EXPLAINS_JIT_MISSES, reason="no `jax.jit` rows on this JAX")
@pytest.mark.parametrize("options", [(), ("--stabilize",)])
def test_gradient_compiles_are_not_charged_to_another_lambda(tmp_path, options):
    report, text = _doctor(tmp_path, *options)
    jax_rows = {
        row["location"].rsplit(":", 1)[-1]: row
        for row in report["functions"]
        if row["jit"] == "jax"
    }
    # `g`, called once: one compile, traced.
    g = jax_rows["4"]
    assert g["misses"] == 1
    (group,) = g["miss_groups"]
    assert group["reason"] == "first call of `<lambda>`: traced and compiled."
    # `h`, differentiated: its own trace, and what JAX derived from it, are its own row's.
    h = jax_rows["8"]
    assert h["misses"] >= 1
    assert all("script.py:8" in row["location"] for row in [h])
    assert set(jax_rows) == {"4", "8"}
    filter_rows = [row for row in report["functions"] if row["jit"] != "jax"]
    assert [(row["calls"], row["misses"]) for row in filter_rows] == [(1, 1), (1, 1)]
    # Two different programs: no miss reuses an equal one, and the words do not say so.
    assert "already compiled for an equal trace" not in text
    assert "compiles 0 times" not in text and ": 0 compiles" not in text
    assert "traced inside another trace" in " ".join(text.split())
