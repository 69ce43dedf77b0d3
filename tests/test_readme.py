"""The README's example and its two commands must stay true."""

import re
import runpy
import shlex
from pathlib import Path
from typing import Any


ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_readme_and_ci_share_the_test_command():
    commands = [block.strip() for block in _blocks("bash")]
    assert len(commands) == 2, "the README shows exactly two commands for a newcomer"
    assert commands[1].endswith("bash scripts/test.sh")
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_readme_main_command_runs_a_file_that_exists():
    main_command = _blocks("bash")[0].strip()
    words = shlex.split(main_command.split("&&")[-1])
    assert words[0] == "python"
    paths = [word for word in words[1:] if word.endswith(".py")]
    assert paths and all((ROOT / path).is_file() for path in paths)


def test_readme_example_compiles_once(capsys):
    (example,) = _blocks("python")
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(example, "README.md", "exec"), namespace)
    info = namespace["loss"].cache_info()
    assert (info.hits, info.misses) == (2, 1)
    assert "misses=1" in capsys.readouterr().out


def test_rebuilt_lambda_example_runs(capsys):
    runpy.run_path(str(ROOT / "examples" / "rebuilt_lambda.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "distinct objects after intern: 1" in out
    assert "slope 0.2 shares the key:      False" in out
