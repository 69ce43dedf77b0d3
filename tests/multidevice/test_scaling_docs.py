"""`docs/scaling.md` runs as written: its examples on 8 CPU devices, with the output it shows, and
its two-process `train.py` launched as the page launches it."""

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from jax.sharding import PartitionSpec

from ._launch import ROOT, run_processes


PAGE = ROOT / "docs" / "scaling.md"
# A fenced block: its language, the rest of the fence line (e.g. ` title="train.py"`), its body.
_BLOCK = re.compile(r"```(\w+)([^\n]*)\n(.*?)```", flags=re.DOTALL)
_SCRIPT = 'title="train.py"'


# Whether this JAX writes shardings as the page shows them (`P(...)`, not `PartitionSpec(...)`).
_SHOWN_JAX = repr(PartitionSpec()) == "P()"


def _blocks() -> list[tuple[str, str, str]]:
    return _BLOCK.findall(PAGE.read_text())


def _normalise(text: str) -> str:
    # Times differ from run to run; everything else must match exactly.
    text = re.sub(r"(compile_seconds|trace_seconds)=[0-9.e+-]+", r"\1=...", text)
    text = re.sub(r"\b\d+\.\d{3}\b", "0.000", text)
    # gloo announces its connections on stdout ("[Gloo] Rank 0 is connected to 3 peer ranks.
    # ..."), from C++, sometimes split over two lines; the page shows only what the script prints.
    lines = [
        line
        for line in text.splitlines()
        if not line.startswith("[Gloo]") and not _GLOO_CONNECTED.match(line)
    ]
    return "\n".join(lines).strip()


_GLOO_CONNECTED = re.compile(r"\s*(Rank )?\d+ is connected to \d+ peer ranks")


def test_examples_run_and_print_what_is_shown(capsys: pytest.CaptureFixture[str]):
    namespace: dict[str, Any] = {"__name__": "docs_scaling"}
    printed: str | None = None
    shown = 0
    for number, (language, attrs, body) in enumerate(_blocks()):
        if language == "python" and _SCRIPT not in attrs:
            capsys.readouterr()
            exec(compile(body, f"docs/scaling.md (block {number})", "exec"), namespace)
            printed = capsys.readouterr().out
        elif language == "text" and printed is not None:
            # The page shows the newest JAX's output; JAX 0.5 writes meshes and specs otherwise.
            if _SHOWN_JAX:
                assert _normalise(printed) == _normalise(body), f"docs/scaling.md (block {number})"
            shown += 1
            printed = None
        else:
            printed = None
    assert shown == 2
    assert [miss.kind for miss in namespace["train_step"].misses] == ["first", "sharding"]


def test_two_process_launch_runs_as_written(tmp_path: Path):
    blocks = _blocks()
    ((index, script),) = [
        (i, body) for i, (lang, attrs, body) in enumerate(blocks) if _SCRIPT in attrs
    ]
    launch = blocks[index + 1]
    assert launch[0] == "bash"
    # The page's launch: two processes, 2 CPU devices each, ids 0 and 1, one coordinator port.
    assert "--xla_force_host_platform_device_count=2" in launch[2]
    assert "python train.py 0 2 12345" in launch[2]
    assert "python train.py 1 2 12345" in launch[2]
    (tmp_path / "train.py").write_text(script)

    def command(process_id: int, port: int) -> list[str]:
        return [sys.executable, str(tmp_path / "train.py"), str(process_id), "2", str(port)]

    finished = run_processes(command, 2, tmp_path)
    language, _, shown = blocks[index + 2]
    assert language == "text"
    # The page shows process 1's report; process 0's differs only in its first line.
    assert _normalise(finished[1].stdout) == _normalise(shown)
    assert _normalise(finished[0].stdout) == _normalise(shown).replace(
        "process 1 of 2 (`jax.process_index()` is 1)", "process 0 of 2 (`jax.process_index()` is 0)"
    )
