"""What the doctor's report says: plain `jax.jit` compiles in the same table, and only what
applies, once."""

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from eqxstable._compat import EXPLAINS_JIT_MISSES

from .helpers import jax_explains_static_arguments, ROOT, run_doctor


needs_jax_explanations = pytest.mark.skipif(
    not EXPLAINS_JIT_MISSES,
    reason="JAX < 0.9 explains `jax.jit` misses otherwise: the doctor leaves them out and says "
    "so (test_a_jax_that_explains_otherwise_is_named_in_the_report)",
)


def _doctor(tmp_path: Path, source: str, *options: str) -> tuple[subprocess.CompletedProcess, dict]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "report.json"
    proc = run_doctor(*options, "--output", out, script)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    return proc, json.loads(text) if "--json" in options else {"text": text}


def _rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"].rsplit(".", 1)[-1]: row for row in report["functions"]}


JAX_JIT = """
    from functools import partial

    import equinox as eqx
    import jax
    import jax.numpy as jnp

    traces = 0

    @partial(jax.jit, static_argnums=1)
    def power(x, n):
        global traces
        traces += 1
        return x**n

    for n in (1, 2, 3, 2, 1):
        power(jnp.arange(3.0), n)

    @jax.jit
    def inner(x):
        return x + 1

    @eqx.filter_jit
    def outer(x):
        return inner(x) * 2

    outer(jnp.ones(2))  # `inner` is traced inside `outer`: part of its program
    inner(jnp.ones(2))  # then compiled on its own, from that trace
    print("traces", traces)
"""


@needs_jax_explanations
def test_jax_jit_compiles_are_counted_and_explained_by_jax(tmp_path):
    proc, report = _doctor(tmp_path, JAX_JIT, "--json")
    assert proc.stdout == "traces 3\n"
    # JAX's explanations are the doctor's to read, not the script's output.
    assert "TRACING CACHE MISS" not in proc.stderr
    rows = _rows(report)
    power = rows["power"]
    assert (power["jit"], power["calls"], power["hits"], power["misses"]) == ("jax", None, None, 3)
    if jax_explains_static_arguments():
        assert power["misses_by_kind"] == {"first": 1, "static": 2}
        static = [g for g in power["miss_groups"] if g["kind"] == "static"]
        assert static[0]["path"] == "args[1]" and "Static(val=2)" in static[0]["reason"]
    else:
        # JAX 0.12 does not say why: the doctor says so rather than guess a cause.
        assert power["misses_by_kind"] == {"first": 1, "unexplained": 2}
        (group,) = [g for g in power["miss_groups"] if g["kind"] == "unexplained"]
        assert "JAX did not say what differs" in group["reason"]
    assert power["compile_seconds"] > 0 and power["location"].endswith("script.py:10")
    assert (rows["inner"]["jit"], rows["inner"]["misses"]) == ("jax", 1)
    assert (rows["outer"]["jit"], rows["outer"]["misses"]) == ("equinox", 1)
    assert report["totals"]["jax_jit_misses"] == 4
    # `--stabilize` changes `equinox.filter_jit` only.
    _, stabilized = _doctor(tmp_path, JAX_JIT, "--json", "--stabilize")
    rows = _rows(stabilized)
    assert (rows["power"]["misses"], rows["inner"]["misses"]) == (3, 1)
    assert rows["outer"]["jit"] == "eqxstable"


def test_a_jax_that_explains_otherwise_is_named_in_the_report(tmp_path):
    # On JAX < 0.9 (the declared floor, 0.5.3) the doctor counts no `jax.jit` compile, says so,
    # and keeps JAX's explanations (which it did not turn on) out of the script's stderr.
    proc, report = _doctor(tmp_path, JAX_JIT)
    assert proc.stdout == "traces 3\n"
    assert "TRACING CACHE MISS" not in proc.stderr
    text = " ".join(report["text"].split())
    note = "does not explain its cache misses as JAX >= 0.9 does"
    rows = report["text"].splitlines()
    if EXPLAINS_JIT_MISSES:
        assert note not in text
        assert any(row.startswith("power (") and " jax " in row for row in rows), rows
    else:
        assert note in text and "plain `jax.jit` compiles are not counted here" in text
        assert not any(row.startswith("power (") for row in rows), rows
    assert any(row.startswith("outer (") and " equinox " in row for row in rows), rows


def test_a_script_on_eqxstable_gets_no_prediction(tmp_path):
    source = """
        import jax.numpy as jnp
        import eqxstable as es

        f = es.filter_jit(lambda x: x + 1)
        f(jnp.ones(2))
        f(jnp.ones(2))
    """
    _, report = _doctor(tmp_path, source)
    text = report["text"]
    assert "1 misses" not in text and "1 hits" not in text
    assert "avoid" not in text and "would" not in text and "type" not in text
    assert "with eqxstable" not in text


def test_stabilize_prints_one_table_and_counts_in_words(tmp_path):
    source = """
        import equinox as eqx
        import jax.numpy as jnp

        f = eqx.filter_jit(lambda x: x + 1)
        f(jnp.ones(2))
        f(jnp.ones(2))
    """
    _, report = _doctor(tmp_path, source, "--stabilize")
    text = report["text"]
    assert text.count("function ") == 1 and "es.report()" not in text
    assert "1 miss in 2 calls." in text
    _, report = _doctor(tmp_path, source)
    words = " ".join(report["text"].split())
    assert "would make the same 1 miss as `equinox.filter_jit` here" in words
    assert "[eqxstable" not in words and "type" not in words


def test_stabilize_counts_equinox_own_wrappers_apart(tmp_path):
    # Attack 13b-08: an eager `eqx.error_if` calls Equinox's own `filter_jit`, made at import,
    # which `--stabilize` leaves to Equinox: its row is `equinox`, and the sentence about the
    # wrappers that ran as eqxstable's counts the `eqxstable` rows alone.
    source = """
        import equinox as eqx
        import jax.numpy as jnp

        for k in (1.0, 2.0, 3.0):
            x = eqx.error_if(jnp.ones(3) * k, jnp.ones(3) * k < 0, "negative")
            eqx.filter_jit(lambda v: v * 2.0)(x)
    """
    _, report = _doctor(tmp_path, source, "--stabilize")
    words = " ".join(report["text"].split())
    assert " equinox " in report["text"]
    assert "Every `equinox.filter_jit`" not in words
    assert "made by the script ran as eqxstable's `filter_jit`: 1 miss in 3 calls." in words
    assert "1 function wrapped before the doctor swapped `equinox.filter_jit` in" in words
    assert "stayed Equinox's: 1 miss in 3 calls." in words


def test_a_function_whose_trace_raised_is_reported_with_the_failure(tmp_path):
    # The only jitted function of the script fails while JAX traces it: the report lists it.
    proc, report = _doctor(
        tmp_path,
        """
        import equinox as eqx
        import jax.numpy as jnp

        @eqx.filter_jit
        def broken(x):
            return x @ jnp.ones(5)

        try:
            broken(jnp.ones(3))
        except TypeError:
            print("raised")
        """,
        "--json",
    )
    assert proc.stdout == "raised\n"
    (row,) = report["functions"]
    assert (row["name"], row["jit"], row["calls"], row["misses"]) == ("broken", "equinox", 1, 1)
    (group,) = row["miss_groups"]
    assert group["kind"] == "first"
    assert "the trace raised TypeError: dot_general" in group["reason"]
    assert "(nothing was compiled)" in group["reason"]


def test_an_equinox_miss_says_first_what_made_equinox_miss(tmp_path):
    # A rebuilt `optax.adam` with another learning rate: Equinox misses because the functions are
    # new objects (identity); eqxstable would miss too, because the learning rate differs.
    pytest.importorskip("optax")
    proc, report = _doctor(
        tmp_path,
        """
        import equinox as eqx
        import jax.numpy as jnp
        import optax

        @eqx.filter_jit
        def step(params, state, optim):
            updates, state = optim.update(params, state, params)
            return optax.apply_updates(params, updates), state

        params = jnp.ones(3)
        for lr in (0.001, 0.003):
            optim = optax.adam(lr)
            step(params, optim.init(params), optim)
        """,
        "--json",
    )
    (row,) = report["functions"]
    (group,) = [g for g in row["miss_groups"] if g["kind"] != "first"]
    reason = group["reason"]
    assert reason.startswith("`args[2].init` (also `args[2].update`) is a new function object, ")
    assert "which `equinox.filter_jit` compares by identity" in reason
    assert "eqxstable's `filter_jit` would compile too" in reason
    assert "-0.001 -> -0.003" in reason and "optax.inject_hyperparams" in reason
    assert "FunctionKey" not in reason


@pytest.mark.counts_traces
def test_a_trace_again_in_another_trace_context_says_so(tmp_path):
    # `jax.grad` of `model` traces `smooth`'s rule under `model`'s own mesh: `apply` is traced
    # again for the same arguments. The observing report counts it as eqxstable's miss too and
    # names the context, apart from the first call (misses of kind `first` are grouped by reason).
    source = (ROOT / "tests" / "doctor_scripts" / "rule_in_another_context.py").read_text()
    _, report = _doctor(tmp_path, source, "--json")
    apply = _rows(report)["apply"]
    assert apply["misses"] == 4 and apply["with_eqxstable"] == 3
    first = [g for g in apply["miss_groups"] if g["kind"] == "first"]
    assert [g["count"] for g in first] == [1, 1]
    assert "first call of `apply`" in first[0]["reason"]
    assert "under another JAX trace context" in first[1]["reason"]
    assert not first[1]["avoidable"]
