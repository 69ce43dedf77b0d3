"""The README's example and its two commands must stay true."""

import ast
import importlib.metadata
import re
import runpy
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest


ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_readme_and_ci_share_the_test_command():
    commands = [block.strip() for block in _blocks("bash")]
    assert len(commands) == 2, "the README shows exactly two commands for a newcomer"
    assert commands[1].endswith("bash scripts/test.sh")
    # CI runs the README's commands themselves, read from this file (scripts/readme-commands.sh).
    assert "bash scripts/readme-commands.sh" in (ROOT / ".ci" / "run").read_text()
    assert "README.md" in (ROOT / "scripts" / "readme-commands.sh").read_text()


def test_readme_main_command_runs_a_file_that_exists():
    main_command = _blocks("bash")[0].strip()
    words = shlex.split(main_command.split("&&")[-1])
    assert words[0] == "python"
    paths = [word for word in words[1:] if word.endswith(".py")]
    assert paths and all((ROOT / path).is_file() for path in paths)


def test_readme_main_command_installs_what_its_script_imports():
    # A fresh machine has only what the command's `pip install` brings: the runtime dependencies
    # and the extras it names. The script's module-level imports must all be among them.
    install, run = _blocks("bash")[0].strip().split("&&")
    extras = {extra for group in re.findall(r"\[([\w,]+)\]", install) for extra in group.split(",")}
    available = {"eqxstable", "numpy"}  # NumPy comes with JAX.
    for requirement in importlib.metadata.requires("eqxstable") or []:
        name = re.match(r"[\w\-.]+", requirement)
        assert name is not None
        extra = re.search(r"extra == [\"'](\w+)[\"']", requirement)
        if extra is None or extra[1] in extras:
            available.add(name[0].replace("-", "_"))
    (script,) = [word for word in shlex.split(run) if word.endswith(".py")]
    tree = ast.parse((ROOT / script).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in tree.body
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
    }
    missing = sorted(imported - available - set(sys.stdlib_module_names))
    assert missing == [], f"`{install.strip()}` does not install what {script} imports: {missing}"


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


def test_readme_first_screen_is_what_the_doctor_prints():
    # The report the README opens with is, to the letter, the one docs/doctor.md shows for the
    # same command, which tests/test_docs.py checks against a real run (seconds aside).
    (shown,) = re.findall(r"```text\n(\$ .*?)```", README, flags=re.DOTALL)
    command = shown.split("\n", 1)[0]
    run = _blocks("bash")[0].strip().split("&&")[-1].strip()
    assert command == f"$ {run} > /dev/null"
    doctor_page = (ROOT / "docs" / "doctor.md").read_text()
    assert shown in doctor_page
    assert README.index(shown) < 1500, "the report belongs on the README's first screen"


def test_readme_test_command_installs_what_the_tests_skip_without():
    # A test that skips when a library is missing (`pytest.importorskip("lineax")`) runs only where
    # the README's test command installs that library: every such library is in an extra it names.
    if sys.version_info < (3, 11):
        pytest.skip("reads pyproject.toml with tomllib (Python >= 3.11)")
    import tomllib

    extras = re.findall(r"\.\[([\w,-]+)\]", _blocks("bash")[1])[0].split(",")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = {
        re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()  # type: ignore[union-attr]
        for name in extras
        for req in declared["optional-dependencies"][name] + declared["dependencies"]
    }
    sources = "\n".join(path.read_text() for path in (ROOT / "tests").rglob("*.py"))
    skipped = set(re.findall(r'importorskip\("([a-z_]+)"\)', sources))
    assert skipped and skipped <= installed, skipped - installed
