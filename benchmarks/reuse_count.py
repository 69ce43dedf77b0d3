"""How many compiles the second level of issue 20 avoids: misses of `es.filter_jit` whose trace
produced a program already compiled (run, not compiled) against all misses.

Two counts:

- the bundled examples and doctor scripts, each run under `eqxstable doctor --stabilize`: the
  misses and compiles of every stable `filter_jit` in the run (`totals` of the JSON report);
- a pytest run (by default `tests/differential`), with a plugin (`_reuse_plugin.py`) whose miss
  listener hears every miss of every stable `filter_jit` in the run, and whether it compiled
  (`Miss.compiled`).

    python benchmarks/reuse_count.py                      # both
    python benchmarks/reuse_count.py --pytest tests/differential -m "not multidevice"
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import header


ROOT = Path(__file__).parent.parent
SCRIPTS = sorted([*ROOT.glob("examples/*.py"), *(ROOT / "tests" / "doctor_scripts").glob("*.py")])


def _script_counts(script: Path) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "eqxstable",
                "doctor",
                "--stabilize",
                "--json",
                "--output",
                str(out),
                str(script),
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
            env=dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")),
        )
        totals = json.loads(out.read_text())["totals"]
    return totals["filter_jit_misses"], totals["filter_jit_compiles"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scripts", action="store_true", help="only the examples")
    parser.add_argument("--pytest", nargs=argparse.REMAINDER, help="only this pytest run")
    args = parser.parse_args()
    header("benchmarks/reuse_count.py")
    if args.pytest is None:
        rows = []
        for script in SCRIPTS:
            misses, compiles = _script_counts(script)
            rows.append((script.relative_to(ROOT).as_posix(), misses, compiles))
        width = max(len(r[0]) for r in rows)
        print(f"{'script (--stabilize)':{width}}  misses  compiles  not compiled")
        for name, misses, compiles in rows:
            print(f"{name:{width}}  {misses:6}  {compiles:8}  {misses - compiles:12}")
        print()
    if not args.scripts:
        pytest_args = args.pytest or ["-q", "-m", "not multidevice", "tests/differential"]
        with tempfile.TemporaryDirectory() as tmp:
            counts_file = Path(tmp) / "counts.json"
            path = os.pathsep.join(
                filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])
            )
            env = dict(os.environ, EQXSTABLE_REUSE_COUNTS=str(counts_file), PYTHONPATH=path)
            command = [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "_reuse_plugin",
                "-p",
                "no:cacheprovider",
            ]
            proc = subprocess.run(
                [*command, *pytest_args], cwd=ROOT, env=env, capture_output=True, text=True
            )
            counts = json.loads(counts_file.read_text())
        print(f"pytest {' '.join(pytest_args)}: {proc.stdout.strip().splitlines()[-1]}")
        misses, saved = counts["misses"], counts["not_compiled"]
        print(
            f"{misses} misses of es.filter_jit, {saved} of them compiled nothing "
            f"({misses - saved} compiles)"
        )


if __name__ == "__main__":
    main()
