"""Table of the client-suite runs made by `benchmarks/clients.sh` (issue 19).

`python3 benchmarks/clients_table.py OUTDIR NAME...` reads `OUTDIR/NAME-MODE.xml` (pytest's JUnit
XML) and `OUTDIR/NAME-MODE.txt` (the runner's output with `/usr/bin/time -v`) for the modes
plain, swapped and verify, and prints one Markdown row per NAME: passed/failed/skipped, wall s
(user + system CPU s), the load average at the start and end, and the swapped / plain and
verify / plain ratios. Then, per NAME, every test whose outcome differs between the modes run.
"""

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


MODES = ("plain", "swapped", "verify")


def outcomes(xml: Path) -> dict[str, str]:
    """Each test's outcome (`passed`, `failed`, `skipped`) by its `file::name` id."""
    result = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            result[test] = "failed"
        elif "skipped" in kinds:
            result[test] = "skipped"
        else:
            result[test] = "passed"
    return result


def times(txt: Path) -> dict[str, object]:
    """Wall s, CPU s (user + system), the loads at start and end and the exit code of a run."""
    text = txt.read_text(errors="replace")

    def seconds(label: str) -> float:
        found = re.search(rf"{re.escape(label)}: ([\d.:]+)", text)
        if found is None:
            return float("nan")
        total = 0.0
        for part in found.group(1).split(":"):
            total = total * 60 + float(part)
        return total

    loads = re.findall(r"^# (?:start|end) \S+ load ([\d.]+)", text, re.M)
    rc = re.search(r"^# end .* rc (\d+)", text, re.M)
    return {
        "wall": seconds("Elapsed (wall clock) time (h:mm:ss or m:ss)"),
        "cpu": seconds("User time (seconds)") + seconds("System time (seconds)"),
        "load": "-".join(loads),
        "rc": rc.group(1) if rc else "running",
    }


def cell(out: Path, name: str, mode: str) -> tuple[str, dict[str, str], dict[str, object]]:
    """One mode's cell, its outcomes and its times (empty where it was not run)."""
    xml, txt = out / f"{name}-{mode}.xml", out / f"{name}-{mode}.txt"
    if not txt.exists():
        return "not run", {}, {}
    t = times(txt)
    tests = outcomes(xml) if xml.exists() else {}
    counts = [sum(v == k for v in tests.values()) for k in ("passed", "failed", "skipped")]
    pfs = "/".join(map(str, counts)) if tests else "no XML"
    text = f"{pfs}, {t['wall']:.1f} s ({t['cpu']:.1f} s), load {t['load']}"
    if t["rc"] not in ("0", "1"):
        text += f", rc {t['rc']}"
    return text, tests, t


def main(out: Path, names: list[str]) -> None:
    print("| run | tests | " + " | ".join(MODES) + " | ratios to plain, wall (CPU) |")
    print("| --- | --- |" + " --- |" * len(MODES) + " --- |")
    differences = []
    for name in names:
        cells = {mode: cell(out, name, mode) for mode in MODES}
        ratios = []
        plain = cells["plain"][2]
        for mode in MODES[1:]:
            other = cells[mode][2]
            if plain and other:
                wall = other["wall"] / plain["wall"]
                cpu = other["cpu"] / plain["cpu"]
                ratios.append(f"{mode} {wall:.2f}x ({cpu:.2f}x)")
        count = max(len(c[1]) for c in cells.values())
        row = [name, str(count), *(cells[m][0] for m in MODES), "; ".join(ratios) or "-"]
        print("| " + " | ".join(row) + " |")
        ran = {m: cells[m][1] for m in MODES if cells[m][1]}
        for test in sorted(set().union(*ran.values()) if ran else ()):
            seen = {m: tests.get(test, "absent") for m, tests in ran.items()}
            if len(set(seen.values())) > 1:
                modes = ", ".join(f"{m} {v}" for m, v in seen.items())
                differences.append(f"{name}: {test}: {modes}")
    print("\nTests whose outcome differs between modes:")
    print("\n".join(differences) or "none")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python3 benchmarks/clients_table.py OUTDIR NAME...")
    main(Path(sys.argv[1]), sys.argv[2:])
