"""The doctor's prediction comes true.

Every script in `examples/` and in `tests/doctor_scripts/` runs under `eqxstable doctor` twice:
observing, then with `--stabilize`. The misses that the first run predicts for eqxstable's
`filter_jit` (how many, and of which kinds) are the misses the second run makes, and plain
`jax.jit` compiles are counted the same in both, and the script prints the same results, except
where Equinox served a program traced for something else. The compiles are predicted too: a miss
whose trace produces a program already compiled runs it (no compile) under `--stabilize`.
"""

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from eqxstable._jit._fingerprint import AVAILABLE

from .helpers import ROOT, run_doctor


SCRIPTS = sorted([*ROOT.glob("examples/*.py"), *(ROOT / "tests" / "doctor_scripts").glob("*.py")])
# Shorter runs of the examples, with the same compiles.
ARGS = {"sweep.py": ["--epochs", "3", "--steps", "2"]}
# How many misses each script is built to make eqxstable avoid (negative: compile more), so that
# a prediction that says nothing cannot pass.
NET_AVOIDED = {
    "sweep.py": 2,
    "rebuilt_lambda.py": 0,
    "global_optimiser.py": 3,
    "jax_jit.py": 0,
    "mixed_jits.py": 1,
    "rebound_global_value.py": -1,
    "equal_but_different.py": 1,
    "jitted_module.py": 2,
    "rebuilt_closures.py": 0,
    "transformed_calls.py": 5,
    # Differentiated, a guest reuses its own first trace, which JAX still holds (attack 9b-06):
    # no trace, as where JAX cannot fingerprint a trace and the second function is no guest.
    "guest_under_transformation.py": 2,
    # A guest, and then its owner, at a new shape and back: each old shape is a hit both ways.
    "guest_at_a_new_shape.py": 0,
    # A guest differentiated at a new shape keeps the shared program at top level.
    "guest_under_a_gradient_at_a_new_shape.py": 2,
    # The rule's call in another trace context is a miss both ways; the rebuilt closure is not.
    "rule_in_another_context.py": 1,
    # Programs that call Python while they run are pinned: no miss avoided, and one reuse (of
    # the functions that only print plain values).
    "pinned_callbacks.py": 0,
    # Each rebuilt function has a new key after the list grew: the same misses, and one more
    # where Equinox serves the first function's stale program.
    "rebuilt_over_a_growing_list.py": -1,
    # A `.lower()` that traces is a miss of eqxstable's (no call of Equinox's row): one more.
    "lowered_then_called.py": -1,
    # After `jax.clear_caches()` both trace again (attack 9b-11: predicted as avoided).
    "cleared_caches.py": 0,
    # Calls that raise while their program runs are the hits and the miss they were (12b-04).
    "error_if_at_run_time.py": 0,
    # Calls under `jax.disable_jit()` are no misses either way (attack 9b-14: predicted traced).
    "eager_call.py": 0,
    # The module's own weight at a new shape is a miss at `fun.weight` both ways.
    "function_array_shapes.py": 0,
    # The rebuilt lambda traces again under new warning filters, both ways (13b-03).
    "warning_filters.py": 2,
    # An output object the trace made pins its entry: each rebuilt lambda traces again (13b-01).
    "made_outputs.py": 0,
    # Traced into the outer `jax.jit` at each shape both ways, compiling nothing of its own.
    "inside_an_outer_jit.py": 0,
}
# How many of eqxstable's misses the doctor predicts to compile no program of their own: they
# trace a program already compiled for an equal trace and run it, or they are traced inside
# another trace (a transformation compiles a program of its own).
REUSED = {
    # Equinox's own `error_if` wrapper (left to Equinox) is traced inside `checked`'s trace.
    "error_if_at_run_time.py": 1,
    # Both traces are inside the outer `jax.jit`'s (13b-07).
    "inside_an_outer_jit.py": 2,
    # The `.lower()` compiles nothing: its `.compile()` compiles the trace (`LATE`).
    "lowered_then_called.py": 1,
    "rule_in_another_context.py": 3,
    "transformed_calls.py": 3,
    "guest_under_a_gradient_at_a_new_shape.py": 4 if AVAILABLE else 2,
    # Reuse, and (with no guest where JAX cannot fingerprint a trace) the guest's traced call.
    **(
        {
            "equal_but_different.py": 1,
            "rebuilt_closures.py": 4,
            "guest_under_transformation.py": 1,
            "guest_at_a_new_shape.py": 2,
            "pinned_callbacks.py": 1,
            # Traced again under new warning filters: an equal trace, no compile.
            "warning_filters.py": 1,
            # Each rebuilt lambda's trace equals the first: it runs that program, its own Log().
            "made_outputs.py": 3,
        }
        if AVAILABLE
        else {}
    ),
}
# How many compiles the doctor predicts with no miss of their own: the first call at the top
# level of what a call traced only under a transformation (JAX compiles the trace it kept), which
# `cache_info().compiles` counts; `misses - compiles` is then `REUSED` less these.
LATE = {
    "lowered_then_called.py": 1,
    "transformed_calls.py": 2,
    # Differentiated at a new shape, then called there at top level: the program the gradient's
    # trace made is compiled then. (A guest called at top level at the types it ran before goes
    # back to the shared program, `_jit/_token.Split`: no late compile in
    # `guest_under_transformation.py`.)
    "guest_under_a_gradient_at_a_new_shape.py": 1,
}
# Scripts where Equinox serves no call that eqxstable would compile: no [eqxstable compiles]
# mark, so the compiles predicted are exact (attack 9b-10: a call after `.lower().compile()` was
# marked, and the `.lower()` not predicted).
NOTHING_ADDED = {"lowered_then_called.py", "cleared_caches.py", "eager_call.py"}
# The lines a script prints differently, because Equinox reuses a program traced for something
# else: {line: (what it prints under Equinox, what it prints under eqxstable's `filter_jit`)}.
# `2 * ints` is int32 but `2.0 * ints` float32; `z + offsets[0]` after `offsets[0] = 5.0` is 6;
# `x * scale` after `scale = 3.0` is 3.
DIFFERENT_RESULTS = {
    "equal_but_different.py": {
        0: ("int32 int32 int32", "int32 float32 int32"),
        1: ("int32 int32", "int32 float32"),
        3: ("[2. 2.]", "[6. 6.]"),
    },
    "rebound_global_value.py": {1: ("[2. 2.]", "[3. 3.]")},
    "rebuilt_over_a_growing_list.py": {6: ("[1. 1.]", "[5. 5.]")},
}


def _doctor(tmp_path: Path, script: Path, *options: str) -> tuple[dict[str, Any], list[str]]:
    out = tmp_path / f"report{'-'.join(options)}.json"
    proc = run_doctor("--json", "--output", out, *options, script, *ARGS.get(script.name, []))
    assert proc.returncode == 0, proc.stderr
    # Timings aside, what the script printed; a progress bar prints as often as time passes (a
    # miss that reuses a compiled program is faster), so its lines are timings too.
    lines = [
        re.sub(r"\d+(\.\d+)? s\b", "_ s", line)
        for line in proc.stdout.splitlines()
        if not re.search(r"\d+%\|", line)
    ]
    return json.loads(out.read_text()), lines


def test_every_script_has_an_expectation():
    assert sorted(NET_AVOIDED) == sorted(script.name for script in SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
@pytest.mark.counts_traces
def test_prediction_is_what_stabilize_does(tmp_path: Path, script: Path):
    observed, printed = _doctor(tmp_path, script)
    stabilized, printed_stable = _doctor(tmp_path, script, "--stabilize")
    misses = observed["totals"]["filter_jit_misses"]
    prediction = observed["prediction"]
    predicted = misses if prediction is None else prediction["filter_jit_misses"]
    # "N misses would be avoided" is exactly what `--stabilize` then does.
    assert misses - predicted == misses - stabilized["totals"]["filter_jit_misses"]
    assert misses - predicted == NET_AVOIDED[script.name]
    if prediction is not None:
        kinds: Counter = Counter()
        for row in stabilized["functions"]:
            if row["jit"] != "jax":
                kinds.update(row["misses_by_kind"])
        assert prediction["filter_jit_misses_by_kind"] == dict(kinds)
        assert prediction["unpredicted_calls"] == 0
        # Traces and compiles separately: the compiles predicted are the ones `--stabilize` makes.
        reused = prediction["filter_jit_misses"] - prediction["filter_jit_compiles"]
        assert reused == REUSED.get(script.name, 0) - LATE.get(script.name, 0)
        # A call Equinox served from its cache but eqxstable traces (an added miss) is counted
        # as a compile: the doctor cannot fingerprint a trace that did not happen.
        compiles = stabilized["totals"]["filter_jit_compiles"]
        upper = prediction["filter_jit_compiles"]
        assert upper - prediction["added"] <= compiles <= upper
        if not prediction["added"]:
            assert compiles == upper
        if script.name in NOTHING_ADDED:
            assert prediction["added"] == 0
    assert observed["totals"]["jax_jit_misses"] == stabilized["totals"]["jax_jit_misses"]
    different = DIFFERENT_RESULTS.get(script.name, {})
    assert printed and len(printed) == len(printed_stable)
    for i, (line, stable_line) in enumerate(zip(printed, printed_stable)):
        assert (line, stable_line) == different.get(i, (line, line))


def test_sweep_prints_the_same_whatever_the_timing(tmp_path: Path):
    # The README's first step installs tqdm (`.[demo]`), whose bar, written into a pipe, depends
    # on timing: the comparison above failed whenever it was installed. A stand-in `tqdm` that
    # writes the clock shows whether the example uses it when its output is not a terminal.
    stub = tmp_path / "stub"
    (stub / "tqdm").mkdir(parents=True)
    (stub / "tqdm" / "__init__.py").write_text(
        "import time\n\n\n"
        "class tqdm:\n"
        "    def __init__(self, *args, file, **kwargs):\n"
        "        self.file = file\n\n"
        "    def set_postfix(self, **kwargs):\n"
        "        pass\n\n"
        "    def update(self, n):\n"
        "        print('stub tqdm', time.perf_counter_ns(), file=self.file)\n\n"
        "    def close(self):\n"
        "        pass\n"
    )
    path = os.pathsep.join([str(stub), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sweep.py"), "--epochs", "2", "--steps", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=path),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    # The plain bar starts each line with a carriage return (it redraws in place on a terminal),
    # which text mode reads as a line break.
    lines = [line for line in proc.stdout.splitlines() if line]
    assert "stub tqdm" not in proc.stdout
    assert [line.split("  loss")[0] for line in lines[:2]] == [
        "sweep [##########..........] epoch 1/2",
        "sweep [####################] epoch 2/2",
    ]
    assert lines[2].startswith("best final loss ")


# Client programs of the libraries that jit inside (issue 19), run where the library is
# installed: `lineax_rebuilt_operator.py` calls lineax's `linear_solve` at top level and under
# `jax.grad`.
CLIENT_SCRIPTS = sorted((ROOT / "tests" / "doctor_scripts" / "clients").glob("*.py"))


@pytest.mark.parametrize("script", CLIENT_SCRIPTS, ids=[s.name for s in CLIENT_SCRIPTS])
@pytest.mark.counts_traces
def test_client_prediction_is_what_stabilize_does(tmp_path: Path, script: Path):
    pytest.importorskip(script.name.split("_")[0])
    observed, printed = _doctor(tmp_path, script)
    stabilized, printed_stable = _doctor(tmp_path, script, "--stabilize")
    prediction = observed["prediction"]
    assert prediction is not None and prediction["unpredicted_calls"] == 0
    made = {row["name"]: row["misses"] for row in stabilized["functions"] if row["jit"] != "jax"}
    kinds: Counter = Counter()
    for row in stabilized["functions"]:
        if row["jit"] != "jax":
            kinds.update(row["misses_by_kind"])
    assert prediction["filter_jit_misses"] == stabilized["totals"]["filter_jit_misses"], made
    assert prediction["filter_jit_misses_by_kind"] == dict(kinds)
    assert prediction["filter_jit_compiles"] == stabilized["totals"]["filter_jit_compiles"]
    assert printed == printed_stable


@pytest.mark.counts_traces
def test_prediction_follows_the_bound_on_one_entrys_programs(tmp_path: Path):
    # Attack 9b-04: beyond `maxsize` (2 here) programs under one entry (8 shapes), eqxstable
    # drops the entry with them and traces the second round again, where Equinox serves all 16
    # calls from JAX's cache. Its `.misses` keeps only the latest 2, so the report counts them.
    script = ROOT / "tests" / "doctor_scripts" / "bounded" / "many_shapes_small_bound.py"
    observed, printed = _doctor(tmp_path, script)
    stabilized, printed_stable = _doctor(tmp_path, script, "--stabilize")
    prediction = observed["prediction"]
    assert observed["totals"]["filter_jit_misses"] == 8
    assert prediction["filter_jit_misses"] == stabilized["totals"]["filter_jit_misses"] == 16
    assert prediction["filter_jit_compiles"] == stabilized["totals"]["filter_jit_compiles"] == 16
    # The entry is dropped at its 3rd program, 5 times over the 16 calls, and the report says so.
    assert prediction["dropped"] == 5 and prediction["added"] == 8
    (row,) = stabilized["functions"]
    assert (row["calls"], row["hits"], row["misses"]) == (16, 0, 16)
    assert printed == printed_stable
