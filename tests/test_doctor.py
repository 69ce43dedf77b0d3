"""`eqxstable doctor`: scripts run as `python SCRIPT` would, every `equinox.filter_jit` counted.

Most tests run the doctor in a subprocess on a small script written to `tmp_path`, with two
witnesses for the counts: a `nonlocal` trace counter inside the jitted function (printed by the
script) and JAX's compile log. A few check the observer in this process, where wrappers made
before it was installed can be set up.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from eqxstable._doctor import Observer, PREFERRED_HOOKS

from .helpers import compile_log, ROOT, run_doctor


# A rebuilt-lambda loop: Equinox compiles three times, eqxstable once. The script prints its own
# trace count, as counted inside the traced function.
SWEEP = """
import equinox as eqx
import jax
import jax.numpy as jnp

traces = 0

@eqx.filter_jit
def loss(model, x):
    global traces
    traces += 1
    return jnp.mean(model(x) ** 2)

for seed in range(3):
    key = jax.random.key(seed)
    model = eqx.nn.MLP(2, 1, 4, 1, activation=lambda z: jax.nn.gelu(z) / 2, key=key)
    for _ in range(2):
        out = loss(model, jnp.ones(2))
print("traces", traces, "dtype", out.dtype)
"""


def _write(tmp_path: Path, source: str, name: str = "script.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def _json_report(tmp_path: Path, *args: Any) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "report.json"
    proc = run_doctor("--json", "--output", out, *args)
    return proc, json.loads(out.read_text())


def test_counts_misses_and_what_eqxstable_avoids(tmp_path):
    script = _write(tmp_path, SWEEP)
    proc, report = _json_report(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    assert "traces 3 dtype float32" in proc.stdout
    (row,) = report["functions"]
    assert (row["name"], row["jit"], row["calls"], row["hits"], row["misses"]) == (
        "loss",
        "equinox",
        6,
        3,
        3,
    )
    assert row["misses_by_kind"] == {"first": 1, "identity": 2}
    identity = [g for g in row["miss_groups"] if g["kind"] == "identity"]
    assert identity[0]["path"] == "args[0].activation" and identity[0]["avoidable"]
    assert "compared by identity" in identity[0]["reason"]
    assert row["avoidable"] == report["prediction"]["avoidable"] == 2
    assert row["with_eqxstable"] == report["prediction"]["with_eqxstable"] == 1
    assert 0 < row["avoidable_compile_seconds"] < row["compile_seconds"]
    assert report["exit_status"] == 0 and report["mode"] == "observe"


@pytest.mark.counts_traces
def test_stabilize_compiles_once(tmp_path):
    script = _write(tmp_path, SWEEP)
    proc, report = _json_report(tmp_path, "--stabilize", script)
    assert proc.returncode == 0, proc.stderr
    assert "traces 1 dtype float32" in proc.stdout
    (row,) = report["functions"]
    assert (row["jit"], row["calls"], row["hits"], row["misses"]) == ("eqxstable", 6, 5, 1)
    assert report["mode"] == "stabilize" and report["prediction"] is None


@pytest.mark.parametrize("stabilize, with_optax", [(False, True), (True, True), (True, False)])
def test_the_readme_demo(tmp_path, monkeypatch, stabilize, with_optax):
    # `examples/sweep.py`, the README's first command, shortened: one compile per epoch under
    # Equinox, all but the first avoidable; one compile in all with `--stabilize`. optax is not a
    # dependency, so the demo must also work where `pip install -e .` did not bring it.
    if not with_optax:
        (tmp_path / "optax.py").write_text("raise ImportError('no optax here')\n")
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    options = ["--stabilize"] if stabilize else []
    proc, report = _json_report(
        tmp_path, *options, "examples/sweep.py", "--epochs", "3", "--steps", "2"
    )
    assert proc.returncode == 0, proc.stderr
    assert "best final loss" in proc.stdout
    (row,) = report["functions"]
    assert row["name"] == "train_step" and row["calls"] == 6
    if stabilize:
        assert (row["jit"], row["misses"]) == ("eqxstable", 1)
    else:
        assert (row["jit"], row["misses"], row["avoidable"]) == ("equinox", 3, 2)
        (group,) = [g for g in row["miss_groups"] if g["avoidable"]]
        assert group["path"] == "args[0].activation"
        assert group["also"] == ["args[2].init", "args[2].update"]


# A training step fed a fresh typed key per step, for each PRNG implementation, and JAX's narrow
# and extended dtypes: the step compiles once per implementation (the key's dtype differs).
KEYS_AND_DTYPES = """
import equinox as eqx
import jax
import jax.numpy as jnp

traces = 0

@eqx.filter_jit
def step(model, key, x):
    global traces
    traces += 1
    return model(x) + jax.random.normal(key, (1,))

model = eqx.nn.Linear(2, 1, key=jax.random.key(0))
for impl in ("threefry2x32", "rbg", "unsafe_rbg"):
    for key in jax.random.split(jax.random.key(0, impl=impl), 3):
        out = step(model, key, jnp.ones(2))

widen = eqx.filter_jit(lambda y: y.astype(jnp.float32))
for dtype in (jnp.bfloat16, jnp.float8_e4m3fn, jnp.int4):
    widen(jnp.ones(3, dtype))
tangent = jax.grad(lambda x, i: x, argnums=1, allow_int=True)(1.0, jnp.arange(3))
eqx.filter_jit(lambda t, x: x * 2)(tangent, jnp.ones(2))
print("traces", traces, "dtype", out.dtype)
"""


@pytest.mark.parametrize("stabilize", [False, True])
@pytest.mark.counts_traces
def test_typed_keys_and_narrow_dtypes(tmp_path, stabilize):
    script = _write(tmp_path, KEYS_AND_DTYPES)
    options = ["--stabilize"] if stabilize else []
    proc, report = _json_report(tmp_path, *options, script)
    assert proc.returncode == 0, proc.stderr
    assert "traces 3 dtype float32" in proc.stdout
    step, widen, _ = report["functions"]
    assert (step["name"], step["calls"], step["misses"]) == ("step", 9, 3)
    assert step["misses_by_kind"] == {"first": 1, "dtype": 2}
    (group,) = [g for g in step["miss_groups"] if g["kind"] == "dtype"]
    assert group["path"] == "args[1]" and "key<fry>[] -> key<rbg>[]" in group["reason"]
    assert (widen["calls"], widen["misses"]) == (3, 3)
    assert "not explained" not in proc.stderr


def test_observe_only_leaves_the_script_unchanged_and_reports_on_stderr(tmp_path):
    script = _write(tmp_path, SWEEP)
    plain = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    proc = run_doctor(script)
    assert proc.returncode == 0
    assert proc.stdout == plain.stdout
    words = " ".join(proc.stderr.split())
    assert "would make 1 miss instead of 3: it avoids 2 (marked [eqxstable avoids])" in words
    assert "identity at `args[0].activation` [eqxstable avoids]" in proc.stderr
    # Only what applies: nothing here is about type exactness, nothing was added.
    assert "type" not in proc.stderr.split("misses by kind and path")[1]
    assert "[eqxstable compiles]" not in proc.stderr


def test_argv_main_and_sibling_imports(tmp_path):
    _write(tmp_path, "GREETING = 'hello from a sibling'\n", "sibling.py")
    script = _write(
        tmp_path,
        """
        import sys
        import sibling

        def main():
            print(sibling.GREETING)
            print("argv", sys.argv)
            print("path0", sys.path[0])

        if __name__ == "__main__":
            main()
        """,
    )
    proc = run_doctor(script, "--lr", "3", "x y", cwd=ROOT / "docs")
    assert proc.returncode == 0, proc.stderr
    assert "hello from a sibling" in proc.stdout
    assert f"argv {[str(script), '--lr', '3', 'x y']}" in proc.stdout
    assert f"path0 {tmp_path}" in proc.stdout
    assert "No `filter_jit` or `jax.jit` function was called." in proc.stderr


def test_exception_prints_traceback_then_report(tmp_path):
    script = _write(
        tmp_path,
        """
        import equinox as eqx
        import jax.numpy as jnp

        f = eqx.filter_jit(lambda x: x + 1)
        f(jnp.ones(2))

        def fail():
            raise ValueError("boom")

        fail()
        """,
    )
    proc = run_doctor(script)
    assert proc.returncode == 1
    traceback, report = proc.stderr.split("eqxstable doctor:", 1)
    assert traceback.startswith("Traceback (most recent call last):")
    assert "line 11, in <module>" in traceback and "in fail" in traceback
    assert "ValueError: boom" in traceback
    assert "runpy" not in traceback and "_run.py" not in traceback
    assert "exited with status 1" in report and "<lambda>" in report


@pytest.mark.parametrize(
    "exit_call, status, message",
    [
        ("sys.exit(3)", 3, None),
        ("sys.exit('bad config')", 1, "bad config"),
        # What the process exits with, as `python` would: the low byte, and `True` as 1.
        ("sys.exit(300)", 44, None),
        ("sys.exit(True)", 1, None),
    ],
)
def test_sys_exit_status_and_report(tmp_path, exit_call, status, message):
    script = _write(
        tmp_path,
        f"""
        import sys
        import equinox as eqx
        import jax.numpy as jnp

        eqx.filter_jit(lambda x: x * 2)(jnp.ones(2))
        {exit_call}
        print("not reached")
        """,
    )
    proc = run_doctor(script)
    assert proc.returncode == status
    assert "not reached" not in proc.stdout
    assert f"exited with status {status}" in proc.stderr
    if message:
        assert proc.stderr.startswith(message + "\n")


@pytest.mark.parametrize(
    "name, source, expected",
    [
        ("missing.py", None, "cannot run '{path}': no such file or directory."),
        ("bad.py", "x = 1\ndef f(:\n", "cannot run '{path}': SyntaxError, line 2: invalid syntax"),
    ],
)
def test_bad_input_is_one_line_and_status_2(tmp_path, name, source, expected):
    path = tmp_path / name
    if source is not None:
        path.write_text(source)
    proc = run_doctor(path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("eqxstable doctor: " + expected.format(path=path))


def test_unwritable_output_is_one_line_and_status_2(tmp_path):
    script = _write(tmp_path, "print('ran')\n")
    out = tmp_path / "missing" / "report.json"
    proc = run_doctor("--output", out, script)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert (
        proc.stderr
        == f"eqxstable doctor: cannot write the report to {str(out)!r}: no such directory.\n"
    )


def test_type_collision_is_reported(tmp_path):
    script = _write(
        tmp_path,
        """
        import equinox as eqx
        import jax.numpy as jnp

        @eqx.filter_jit
        def scale(x, factor):
            return x * factor

        print(scale(jnp.ones(2, dtype=jnp.int32), 2).dtype)
        print(scale(jnp.ones(2, dtype=jnp.int32), 2.0).dtype)
        """,
    )
    proc, report = _json_report(tmp_path, script)
    assert proc.stdout.split() == ["int32", "int32"]  # Equinox's wrong dtype for the second call
    (row,) = report["functions"]
    assert (row["calls"], row["misses"]) == (2, 1)
    assert (row["added"], row["with_eqxstable"]) == (1, 2)
    (added,) = row["added_groups"]
    assert (added["kind"], added["path"]) == ("static", "args[1]")
    assert "int 2 -> float 2.0" in added["reason"] and "wrong dtype" in added["reason"]
    proc, report = _json_report(tmp_path, "--stabilize", script)
    assert proc.stdout.split() == ["int32", "float32"]
    assert report["functions"][0]["misses"] == 2


def test_type_collision_in_a_static_field_is_reported(tmp_path):
    script = _write(
        tmp_path,
        """
        import equinox as eqx
        import jax.numpy as jnp

        class Scale(eqx.Module):
            factor: object = eqx.field(static=True)

        @eqx.filter_jit
        def scale(model, x):
            return x * model.factor

        print(scale(Scale(2), jnp.ones(2, dtype=jnp.int32)).dtype)
        print(scale(Scale(2.0), jnp.ones(2, dtype=jnp.int32)).dtype)
        """,
    )
    proc, report = _json_report(tmp_path, script)
    assert proc.stdout.split() == ["int32", "int32"]  # Equinox's wrong dtype for the second call
    (row,) = report["functions"]
    assert (row["calls"], row["misses"]) == (2, 1)
    assert (row["added"], row["with_eqxstable"]) == (1, 2)
    assert row["added_groups"][0]["path"] == "args[0].factor"
    proc, report = _json_report(tmp_path, "--stabilize", script)
    assert proc.stdout.split() == ["int32", "float32"]


def test_observing_adds_no_warning(tmp_path):
    # Keying this argument would warn (`__hash__` without `__eq__`); the doctor must stay silent.
    script = _write(
        tmp_path,
        """
        import warnings
        import equinox as eqx
        import jax.numpy as jnp

        warnings.simplefilter("error")

        class Config:
            def __hash__(self):
                return 0

        f = eqx.filter_jit(lambda x, config: x + 1)
        f(jnp.ones(2), Config())
        f(jnp.ones(2), Config())
        print("done")
        """,
    )
    proc, report = _json_report(tmp_path, script)
    assert (proc.returncode, proc.stdout) == (0, "done\n"), proc.stderr
    assert report["functions"][0]["misses"] == 2


def test_stable_wrappers_of_the_script_are_reported(tmp_path):
    script = _write(
        tmp_path,
        """
        import jax.numpy as jnp
        import eqxstable as es

        @es.filter_jit
        def f(x):
            return x + 1

        for n in (2, 2, 3):
            f(jnp.ones(n))
        """,
    )
    proc, report = _json_report(tmp_path, script)
    (row,) = report["functions"]
    assert (row["jit"], row["calls"], row["misses"]) == ("eqxstable", 3, 2)
    assert row["misses_by_kind"] == {"first": 1, "shape": 1}


def test_console_script_is_installed(tmp_path):
    proc = subprocess.run(
        ["eqxstable", "doctor", str(_write(tmp_path, "print('ran')\n"))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout == "ran\n"


# In this process: the hooks, and wrappers made before the doctor started.


def test_equinox_internals_are_where_the_doctor_expects():
    # If this fails, Equinox moved `_call` or `hashable_combine`: the doctor still runs, on its
    # fallbacks (see `eqxstable/_doctor/_observe.py`), but should be taught the new place.
    observer = Observer()
    try:
        assert observer.install() == PREFERRED_HOOKS
    finally:
        observer.uninstall()
    assert eqx._jit._call.__module__ == "equinox._jit"  # pyright: ignore
    assert eqx._jit.hashable_combine.__module__ == "equinox._compile_utils"  # pyright: ignore


def test_wrappers_made_before_install_are_counted_and_agree_with_jax():
    traces = 0

    @eqx.filter_jit
    def double(x):
        nonlocal traces
        traces += 1
        return 2 * x

    observer = Observer()
    observer.install()
    try:
        with compile_log() as log:
            for n in (2, 2, 3, 3, 3):
                double(jnp.ones(n))
    finally:
        observer.uninstall()
    (record,) = observer.records
    assert (record.name.split(".")[-1], record.calls, len(record.misses)) == ("double", 5, 2)
    assert traces == len(record.misses) == log.count("double")
    assert [m.kind for m in record.misses] == ["first", "shape"]
    assert record.misses[1].path == "args[0]"
    double(jnp.ones(4))  # uninstalled: no longer counted
    assert record.calls == 5


@pytest.mark.parametrize("fallback", [False, True])
def test_fallback_hooks_count_the_same(fallback):
    traces = 0

    @eqx.filter_jit
    def halve(x, flag):
        nonlocal traces
        traces += 1
        return x / 2 if flag else x

    observer = Observer()
    hooks = observer.install(fallback=fallback)
    try:
        for n, flag in [(2, True), (2, True), (3, True), (3, False), (3, False)]:
            halve(jnp.ones(n), flag)
    finally:
        observer.uninstall()
    expected = ("equinox._jit._JitWrapper.__call__", "jax.monitoring")
    assert hooks == (expected if fallback else PREFERRED_HOOKS)
    (record,) = observer.records
    assert (record.calls, len(record.misses), traces) == (5, 3, 3)
    assert [(m.kind, m.path) for m in record.misses] == [
        ("first", ""),
        ("shape", "args[0]"),
        ("static", "args[1]"),
    ]


def test_nested_and_rewrapped_functions():
    @eqx.filter_jit
    def inner(x):
        return x + 1

    @eqx.filter_jit
    def outer(x):
        return inner(x) * 2

    observer = Observer()
    observer.install()
    try:
        outer(jnp.ones(2))
        outer(jnp.ones(2))
        for _ in range(3):
            eqx.filter_jit(lambda x: x - 1)(jnp.ones(2))
    finally:
        observer.uninstall()
    by_name = {r.name.rsplit(".", 1)[-1]: r for r in observer.records}
    assert (by_name["outer"].calls, len(by_name["outer"].misses)) == (2, 1)
    assert (by_name["inner"].calls, len(by_name["inner"].misses)) == (1, 1)
    rewrapped = by_name["<lambda>"]
    assert (rewrapped.caches, rewrapped.calls, len(rewrapped.misses)) == (3, 3, 3)
    assert [m.avoidable for m in rewrapped.misses] == [False, True, True]
    assert rewrapped.misses[1].path == "(the jitted function)"
    assert [m.kind for m in rewrapped.predicted] == ["first"]
    assert [m.kind for m in by_name["inner"].predicted] == ["first"]


def test_lower_is_not_a_call():
    f = eqx.filter_jit(lambda x: x + 1)
    observer = Observer()
    observer.install()
    try:
        f.lower(jnp.ones(2))  # pyright: ignore[reportFunctionMemberAccess]
        f(jax.numpy.ones(2))
    finally:
        observer.uninstall()
    (record,) = observer.records
    assert (record.calls, len(record.misses)) == (1, 1)
