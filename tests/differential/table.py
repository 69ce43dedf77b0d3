"""Prints the differential corpus as a Markdown table: one row per situation, one column per mode
(`eqx` is plain `equinox.filter_jit`, for comparison; it is not a test).

Run from the repository root: `python -m tests.differential.table [substring]`.
"""

import importlib
import os
import pkgutil
import sys
import time
from pathlib import Path


# Every step of every situation is checked against a fresh trace, not only the wrong ones.
os.environ["EQXSTABLE_DIFFERENTIAL_CONFIRM"] = "1"

from .executables import shared_executables  # noqa: E402
from .harness import ALL_MODES, IllPosed, run  # noqa: E402


def situations() -> list:
    found = []
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name.startswith("test_"):
            module = importlib.import_module(f"{__package__}.{info.name}")
            for situation in getattr(module, "SITUATIONS", ()):
                found.append((info.name[len("test_") :], situation))
    return found


def main() -> None:
    pattern = sys.argv[1] if len(sys.argv) > 1 else ""
    print("| file | situation | " + " | ".join(ALL_MODES) + " |")
    print("|---|---|" + "---|" * len(ALL_MODES))
    counts = {mode: 0 for mode in ALL_MODES}
    total = 0
    start = time.perf_counter()
    for file, situation in situations():
        if pattern not in situation.__name__:
            continue
        total += 1
        cells = []
        for mode in ALL_MODES:
            try:
                status = run(situation, mode).status
            except IllPosed:
                status = "ILL-POSED"
            except AssertionError as e:
                status = f"TEST-ERROR ({e})"
            if status == "pass":
                counts[mode] += 1
            cells.append(status)
        print(f"| {file} | {situation.__name__} | " + " | ".join(cells) + " |", flush=True)
    print()
    print(
        f"{total} situations in {time.perf_counter() - start:.0f} s; passing per mode: "
        + ", ".join(f"{mode} {counts[mode]}/{total}" for mode in ALL_MODES)
    )


if __name__ == "__main__":
    with shared_executables():
        main()
