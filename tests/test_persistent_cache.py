"""The recipe of docs/persistent_cache.md: a sweep run as separate processes that share JAX's
persistent compilation cache compiles the train step in the first process only, and eqxstable's
accounting says so (a program JAX loaded from the cache is no compile)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).parent.parent
PAGE = ROOT / "docs" / "persistent_cache.md"


def _trial_script() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "docs/persistent_cache.md shows one script, `trial.py`"
    return blocks[0]


def _run(trial: Path, learning_rate: float, cache: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, str(trial), str(learning_rate), str(cache)],
        capture_output=True,
        text=True,
        cwd=trial.parent,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.counts_traces
def test_processes_after_the_first_compile_nothing(tmp_path: Path):
    trial = tmp_path / "trial.py"
    trial.write_text(_trial_script())
    cache = tmp_path / "cache"
    # The third process repeats the first one's learning rate: the program it loaded from disk
    # computes what the compiled one did.
    first, second, third = (_run(trial, lr, cache) for lr in (0.1, 0.03, 0.1))
    assert (first["traces"], first["compiles"], first["loaded"]) == (1, 1, 0)
    assert first["xla_compiles"] == 1
    for later in (second, third):
        # Traced (a new process has nothing in memory), lowered, then loaded: XLA compiled
        # nothing, by JAX's own events and by eqxstable's count.
        assert (later["traces"], later["compiles"], later["loaded"]) == (1, 0, 1)
        assert later["xla_compiles"] == 0
        assert later["reason"].endswith("from the persistent compilation cache (no compile).")
    assert first["reason"].endswith("traced and compiled.")
    assert third["loss"] == first["loss"]
    assert second["loss"] != first["loss"]
    assert any(cache.iterdir())


def test_without_the_cache_every_process_compiles(tmp_path: Path):
    # The counts above come from the cache, not from something else in the script: with the
    # cache directory emptied before each run, every process compiles.
    trial = tmp_path / "trial.py"
    trial.write_text(_trial_script())
    for n in range(2):
        result = _run(trial, 0.1, tmp_path / f"cache{n}")
        assert (result["compiles"], result["loaded"], result["xla_compiles"]) == (1, 0, 1)
