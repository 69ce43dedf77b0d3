"""Having eqxstable installed changes nothing for other projects' test suites: the pytest plugin
(loaded by entry point into every pytest run) imports neither JAX nor Equinox at startup.

Each test starts a fresh `python -m pytest` in a temporary directory, since this process has long
imported both; the plugin is the one registered by entry point, as another project gets it.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest


# Modules that must not be imported when pytest starts, by name or as a parent package.
_HEAVY = ("jax", "jaxlib", "equinox", "eqxstable._jit", "eqxstable._keys", "eqxstable._module")
_TRIVIAL_TEST = "def test_arithmetic():\n    assert 1 + 1 == 2\n"


def _pytest(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=directory,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _imported(importtime_log: str) -> set[str]:
    """The module names in the output of `python -X importtime`."""
    names = set()
    for line in importtime_log.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def _is_heavy(name: str) -> bool:
    return any(name == heavy or name.startswith(heavy + ".") for heavy in _HEAVY)


def test_startup_imports_neither_jax_nor_equinox(tmp_path):
    (tmp_path / "test_plain.py").write_text(_TRIVIAL_TEST)
    # `--eqxstable-verify` is the plugin's option: pytest refuses it unless the plugin is loaded.
    args = ("-X", "importtime", "-m", "pytest", "-q", "-p", "no:cacheprovider")
    run = _pytest(tmp_path, *args, "--eqxstable-verify")
    assert run.returncode == 0, run.stdout + run.stderr
    imported = _imported(run.stderr)
    # What the plugin does import (the package's light modules) is seen in the log.
    assert "eqxstable._errors" in imported
    assert sorted(filter(_is_heavy, imported)) == []


def test_jaxtyping_import_hook_on_equinox_still_installs(tmp_path):
    # jaxtyping refuses to instrument a package that is already imported when pytest starts
    # ("jaxtyping cannot check these packages because they are already imported: equinox"), as
    # Equinox's own test suite does with `--jaxtyping-packages=equinox,...`.
    pytest.importorskip("jaxtyping")
    (tmp_path / "test_plain.py").write_text(_TRIVIAL_TEST)
    (tmp_path / "checker.py").write_text("def identity(f):\n    return f\n")
    run = _pytest(
        tmp_path,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--jaxtyping-packages=equinox,checker.identity",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_importing_the_package_is_light_and_names_load_on_use(tmp_path):
    code = (
        "import sys\n"
        "import eqxstable as es\n"
        "assert 'jax' not in sys.modules and 'equinox' not in sys.modules\n"
        "assert es.RecompileError.__name__ == 'RecompileError'\n"
        "assert 'jax' not in sys.modules\n"
        "import jax.numpy as jnp\n"
        "print(float(es.filter_jit(lambda x: x * 3)(jnp.asarray(2.0))))\n"
        "print(sorted({'filter_jit', 'StableModule', 'stable_key'} - set(dir(es))))\n"
    )
    run = _pytest(tmp_path, "-c", code)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["6.0", "[]"]


def test_verify_option_turns_on_verify_mode_for_the_session(tmp_path):
    (tmp_path / "test_env.py").write_text(
        "import os\n\n\ndef test_env():\n    assert os.environ.get('EQXSTABLE_VERIFY') == '1'\n"
    )
    base = ("-m", "pytest", "-q", "-p", "no:cacheprovider")
    with_option = _pytest(tmp_path, *base, "--eqxstable-verify")
    assert with_option.returncode == 0, with_option.stdout + with_option.stderr
    env = {k: v for k, v in os.environ.items() if k != "EQXSTABLE_VERIFY"}
    without = subprocess.run(
        [sys.executable, *base],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert without.returncode == 1
    assert "1 failed" in without.stdout


_CONFTEST_WRAPPER = """
import jax
import eqxstable as es


def act(x):
    return jax.nn.relu(x)


made_in_conftest = es.filter_jit(act)
"""

_EDITS_RELU = """
import jax, jax.numpy as jnp, pytest
import eqxstable as es
from conftest import act, made_in_conftest

made_in_test_module = es.filter_jit(act)


@pytest.mark.parametrize("where", ["conftest", "test_module"])
def test_edited_library_is_caught(where, monkeypatch):
    f = made_in_conftest if where == "conftest" else made_in_test_module
    y = jnp.array([-1.0, 2.0])
    assert f(y).tolist() == [0.0, 2.0]
    monkeypatch.setattr(jax.nn, "relu", jnp.tanh)
    with pytest.raises(es.StaleProgramError, match="act"):
        f(y)
"""


def test_verify_option_reaches_wrappers_made_in_conftest(tmp_path):
    # The rootdir conftest.py is imported before `pytest_configure`: a wrapper made there (a
    # shared jitted helper) was never verified under `--eqxstable-verify` (attack 13b-09).
    (tmp_path / "conftest.py").write_text(_CONFTEST_WRAPPER)
    (tmp_path / "test_edit.py").write_text(_EDITS_RELU)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != "EQXSTABLE_VERIFY"}
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    for option in (["--eqxstable-verify"], ["-o", "addopts=--eqxstable-verify"]):
        run = subprocess.run(
            [*base, *option],
            cwd=tmp_path,
            env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "2 passed" in run.stdout


def test_doctor_stabilize_starts_pytest_under_filterwarnings_error(tmp_path):
    # The doctor imports eqxstable (and, through Equinox, jaxtyping's plugin) before pytest
    # starts, so pytest cannot rewrite those plugins' asserts and warns; a project's
    # `filterwarnings = error` made that a start-up error (issue 19 item 3).
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'
    )
    (tmp_path / "test_small.py").write_text(
        "import warnings\n"
        "import equinox as eqx\n"
        "import jax.numpy as jnp\n\n"
        "def test_jit():\n"
        "    f = eqx.filter_jit(lambda x: x + 1)\n"
        "    assert float(f(jnp.array(1.0))) == 2.0\n\n"
        "def test_warnings_are_still_errors():\n"
        "    try:\n"
        "        warnings.warn('still an error', UserWarning)\n"
        "    except UserWarning:\n"
        "        return\n"
        "    raise AssertionError('filterwarnings = error no longer applies')\n"
    )
    out = _pytest(
        tmp_path,
        "-m",
        "eqxstable",
        "doctor",
        "--stabilize",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 passed" in out.stdout
    assert "eqxstable.filter_jit in place of equinox.filter_jit" in out.stderr
    assert "PYTEST_ADDOPTS" not in os.environ
