"""A call that raises while its compiled program runs (an `eqx.error_if` failing) is the call it
was, under the doctor as under `--stabilize`: a miss that traced and compiled, or a hit; only a
call whose trace raised is a failed trace (attack 12b-04)."""

import json
from pathlib import Path

import pytest

from .helpers import ROOT, run_doctor


SCRIPT = ROOT / "tests" / "doctor_scripts" / "error_if_at_run_time.py"


def _report(tmp_path: Path, *options: str) -> dict:
    out = tmp_path / "report.json"
    proc = run_doctor(*options, "--json", "--output", out, SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "3 -1.0\n"
    return json.loads(out.read_text())


@pytest.mark.parametrize("options", [(), ("--stabilize",)])
def test_calls_that_raise_at_run_time_are_counted_as_the_calls_they_were(tmp_path, options):
    report = _report(tmp_path, *options)
    (row,) = [r for r in report["functions"] if r["name"].rsplit(".", 1)[-1] == "checked"]
    assert (row["calls"], row["hits"], row["misses"]) == (4, 3, 1)
    (group,) = row["miss_groups"]
    assert group["kind"] == "first"
    assert group["reason"] == "first call of `checked`: traced and compiled."
    assert "raised" not in json.dumps(row)
    if not options:
        # The prediction agrees: one miss that compiles.
        assert (row["with_eqxstable"], row["with_eqxstable_compiles"]) == (1, 1)
