"""The `eqxstable` command line: its conventions (`--version`, `-m MODULE` as `python -m` has
it, the usage line) and its one-line errors."""

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eqxstable._cli import main
from eqxstable._compat import EXPLAINS_JIT_MISSES

from .helpers import jax_explains_static_arguments


ROOT = Path(__file__).parent.parent


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eqxstable", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT)),
        timeout=300,
    )


def test_version(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"eqxstable {importlib.metadata.version('eqxstable')}\n"


def test_usage_shows_script_or_module_and_optional_args(capsys):
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    usage = capsys.readouterr().out.splitlines()[0]
    assert usage == (
        "usage: eqxstable doctor [-h] [--stabilize] [--json] [--output FILE] "
        "(SCRIPT | -m MODULE) [ARGS ...]"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["doctor"], r"give the script to run \(SCRIPT\) or a module \(-m MODULE\)"),
        (["doctor", "-m"], "argument -m: expected the MODULE to run"),
        (["doctor", "--json"], r"give the script to run \(SCRIPT\)"),
    ],
)
def test_missing_target_is_a_usage_error(capsys, argv, message):
    with pytest.raises(SystemExit, match="2"):
        main(argv)
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize(
    "module, message",
    [
        ("no_such_module_here", "no module named 'no_such_module_here'"),
        ("no_such_package.tool", "no module named 'no_such_package'"),
        ("json", "it is a package without a __main__.py"),
    ],
)
def test_bad_module_is_one_line_and_status_2(capsys, module, message):
    assert main(["doctor", "-m", module]) == 2
    err = capsys.readouterr().err
    assert err == f"eqxstable doctor: cannot run module {module!r}: {message}.\n"


def test_module_runs_as_python_m_runs_it(tmp_path):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tool.py").write_text(
        "import sys\n"
        "import jax, jax.numpy as jnp\n"
        "f = jax.jit(lambda x, n: x * n, static_argnums=1)\n"
        "for n in (1, 2):\n"
        "    f(jnp.ones(2), n)\n"
        "print('argv', sys.argv[1:], __name__, sys.path[0])\n"
    )
    plain = subprocess.run(
        [sys.executable, "-m", "mypkg.tool", "--json", "x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        timeout=300,
    )
    out = tmp_path / "report.json"
    # Options after `-m MODULE` are the module's own, as with `python -m`.
    proc = _run(
        "doctor", "--output", str(out), "--json", "-m", "mypkg.tool", "--json", "x", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == plain.stdout == f"argv ['--json', 'x'] __main__ {tmp_path}\n"
    report = json.loads(out.read_text())
    assert report["script"] == "-m mypkg.tool"
    # JAX's explanations, turned on by the doctor, are not the script's output.
    assert "TRACING CACHE MISS" not in proc.stderr
    if not EXPLAINS_JIT_MISSES:
        # JAX < 0.9 explains `jax.jit` misses otherwise: the doctor counts none there, says so.
        assert (report["functions"], report["hooks"]["jax_jit"]) == ([], False)
        return
    (row,) = report["functions"]
    assert (row["jit"], row["misses"]) == ("jax", 2)
    static = "static" if jax_explains_static_arguments() else "unexplained"
    assert row["misses_by_kind"] == {"first": 1, static: 1}


def test_output_path_is_the_invoking_directory_s_after_the_script_changes_directory(tmp_path):
    # A relative `--output` names a file where the user ran the doctor, as every tool resolves
    # its own arguments, even when the script `os.chdir`s away before the report is written.
    (tmp_path / "sub").mkdir()
    (tmp_path / "s.py").write_text("import os\nos.chdir('sub')\n")
    proc = _run("doctor", "--json", "--output", "rep.json", "s.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "sub" / "rep.json").exists()
    assert json.loads((tmp_path / "rep.json").read_text())["script"] == "s.py"
    # The message names the file unambiguously, whatever the script's directory now is.
    where = str(tmp_path / "rep.json")
    assert proc.stderr.splitlines()[-1] == f"eqxstable doctor: report written to {where}"
