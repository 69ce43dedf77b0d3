"""The doctor reads JAX's `jax.jit` explanations without the script noticing: the script reads
its own `jax_explain_cache_misses`, gets exactly the `TRACING CACHE MISS` records it asked for
(turned on in code, at any time), worded as without the doctor, and the doctor still counts
every compile. Each script is run with `python` and with the doctor; their output must match."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eqxstable._compat import EXPLAINS_JIT_MISSES


ROOT = Path(__file__).resolve().parents[1]

# Counts the explanations that reach the script's own handler, the option as it reads it, and
# the explanations that say a function was redefined on the same line.
PRELUDE = """
import logging
import jax
import jax.numpy as jnp

seen = []


class Collect(logging.Handler):
    def emit(self, record):
        seen.append(record.getMessage())


logging.getLogger("jax").addHandler(Collect())
print("option at start:", jax.config.jax_explain_cache_misses)
"""

ASKS_IN_CODE = """
jax.config.update("jax_explain_cache_misses", True)
f = jax.jit(lambda x, n: x * n, static_argnums=1)
f(jnp.ones(2), 1)
f(jnp.ones(2), 2)
print("explanations seen by the script:", sum(m.startswith("TRACING CACHE MISS") for m in seen))
"""

NEVER_ASKS = """
f = jax.jit(lambda x, n: x * n, static_argnums=1)
f(jnp.ones(2), 1)
f(jnp.ones(2), 2)
print("explanations seen by the script:", len(seen))
print("option at end:", jax.config.jax_explain_cache_misses)
"""

# The first function is explained for the doctor only; the second, made on the same line, is the
# first the script asks about: JAX must not say it saw one there before.
ASKS_LATER = """
def make():
    return jax.jit(lambda x: x + 1)


for i in range(2):
    if i == 1:
        jax.config.update("jax_explain_cache_misses", True)
    make()(jnp.ones(2))
print("explanations seen by the script:", len(seen))
print("same line:", sum("same line" in m for m in seen))
with jax.explain_cache_misses(False):
    make()(jnp.ones(2))
print("explanations seen by the script:", len(seen))
"""


def _run(tmp_path: Path, body: str, *doctor: str) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(PRELUDE + body))
    env = {k: v for k, v in os.environ.items() if k != "JAX_EXPLAIN_CACHE_MISSES"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, *doctor, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )


def _rows(report_path: Path) -> dict:
    report = json.loads(report_path.read_text())
    return {row["name"]: row for row in report["functions"]}


@pytest.mark.parametrize(
    "body, expected",
    [
        (ASKS_IN_CODE, "option at start: False\nexplanations seen by the script: 2\n"),
        (
            NEVER_ASKS,
            "option at start: False\nexplanations seen by the script: 0\noption at end: False\n",
        ),
        (
            ASKS_LATER,
            "option at start: False\nexplanations seen by the script: 1\nsame line: 0\n"
            "explanations seen by the script: 1\n",
        ),
    ],
    ids=["asks-in-code", "never-asks", "asks-later"],
)
def test_the_script_sees_its_own_option_and_the_records_it_asked_for(tmp_path, body, expected):
    plain = _run(tmp_path, body)
    assert plain.returncode == 0, plain.stderr
    if EXPLAINS_JIT_MISSES:
        # JAX < 0.9 also explains its own functions (`jnp.ones`'s), so more records there.
        assert plain.stdout == expected
    report = tmp_path / "report.json"
    doctor = _run(tmp_path, body, "-m", "eqxstable", "doctor", "--json", "--output", str(report))
    assert doctor.returncode == 0, doctor.stderr
    assert doctor.stdout == plain.stdout
    if not EXPLAINS_JIT_MISSES:
        return
    # The doctor counted every compile, whatever the script asked for.
    (row,) = _rows(report).values()
    if body is ASKS_LATER:
        # Two `jax.jit` functions called on one line, then one more on another: the doctor says
        # so from its own memory of where JAX explained new functions.
        assert row["misses_by_kind"] == {"first": 2, "identity": 1}, row
    else:
        assert row["misses"] == 2 and row["misses_by_kind"]["first"] == 1, row


def test_the_switch_is_the_doctors_alone_where_jax_explains():
    # The tripwire for `ExplainSwitch`: on a JAX that explains misses as the doctor reads them,
    # the watch switches JAX's explaining cache on without touching the option the script reads,
    # and puts JAX back as it was. If JAX moves the name it reads, this fails (the doctor would
    # fall back to turning the option on for everyone).
    import jax
    from jax._src import config as jax_config, util

    from eqxstable._doctor._jax_jit import JaxJitWatch

    outer, inner = JaxJitWatch(lambda: False), JaxJitWatch(lambda: False)
    assert outer.install() == EXPLAINS_JIT_MISSES
    try:
        if not EXPLAINS_JIT_MISSES:
            assert util.config is jax_config
            return
        assert outer._switch is not None
        assert inner.install() and inner._switch is not None
        assert jax.config.jax_explain_cache_misses is False  # pyright: ignore
        assert util.config is not jax_config and util.config.explain_cache_misses.value
        # Ended in either order, JAX reads its own configuration once both have ended.
        outer.uninstall()
        assert util.config is not jax_config
    finally:
        outer.uninstall()
        inner.uninstall()
    assert util.config is jax_config
    assert jax.config.jax_explain_cache_misses is False  # pyright: ignore
