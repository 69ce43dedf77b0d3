"""The doctor starts a script as `python` does: everything the script can see of how it was
started (`__file__`, `__loader__`, `__spec__`, `__package__`, `__builtins__`, the names in its
globals, `sys.argv`, `sys.path`, `sys.modules["__main__"]`) is compared with a real `python`
subprocess, for a file given by a relative or an absolute path, through a symbolic link, a
directory, and `-m` (a module and a package)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]

# Prints what it can see of its start; no addresses, so that two runs compare equal.
SHOW = """
import os, sys

def spec_of(spec):
    return None if spec is None else (spec.name, spec.origin, spec.parent)

loader = globals().get("__loader__")
print("file", repr(globals().get("__file__")))
print("loader", type(loader).__name__, getattr(loader, "name", None), getattr(loader, "path", None))
print("spec", spec_of(__spec__))
print("package", repr(__package__), "cached", repr(globals().get("__cached__")))
print("builtins", type(__builtins__).__name__)
print("names", sorted(globals()))
print("main", sys.modules["__main__"].__dict__ is globals())
print("argv", sys.argv)
print("path", sys.path)
"""

# Finding attack5b-05: a script that reads a file next to itself after changing directory.
NEXT_TO_ITSELF = """
import os
here = os.path.dirname(__file__)
os.makedirs(os.path.join(here, "runs"), exist_ok=True)
os.chdir(os.path.join(here, "runs"))
with open(os.path.join(here, "config.txt")) as f:
    print("config:", f.read().strip())
"""


def _python(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "show.py").write_text(SHOW)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "link.py").symlink_to(tmp_path / "show.py")
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for path in (package / "__init__.py", package / "sub" / "__init__.py"):
        path.write_text("")
    (package / "__main__.py").write_text(SHOW)
    (package / "sub" / "mod.py").write_text(SHOW)
    return tmp_path


@pytest.mark.parametrize(
    "form",
    [
        ["show.py", "a", "b c"],
        ["./show.py"],
        ["ABSOLUTE/show.py", "--flag"],
        ["other/link.py"],
        ["pkg", "x"],
        ["-m", "pkg.sub.mod", "x"],
        ["-m", "pkg"],
    ],
)
def test_the_script_sees_what_python_shows_it(tree, form):
    form = [part.replace("ABSOLUTE", str(tree)) for part in form]
    plain = _python(form, tree)
    assert plain.returncode == 0, plain.stderr
    doctor = _python(["-m", "eqxstable", "doctor", *form], tree)
    assert doctor.returncode == 0, doctor.stderr
    assert doctor.stdout == plain.stdout


def test_a_script_that_reads_next_to_itself_after_chdir(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(NEXT_TO_ITSELF))
    (tmp_path / "config.txt").write_text("lr=0.1")
    plain = _python(["train.py"], tmp_path)
    assert plain.stdout == "config: lr=0.1\n", plain.stderr
    doctor = _python(["-m", "eqxstable", "doctor", "train.py"], tmp_path)
    assert (doctor.returncode, doctor.stdout) == (0, plain.stdout), doctor.stderr


def test_a_traceback_names_the_script_as_python_does(tmp_path):
    (tmp_path / "fail.py").write_text("def f():\n    raise ValueError('no')\n\nf()\n")
    plain = _python(["fail.py"], tmp_path)
    doctor = _python(["-m", "eqxstable", "doctor", "fail.py"], tmp_path)
    assert plain.returncode == doctor.returncode == 1
    assert f'File "{tmp_path}/fail.py", line 4, in <module>' in plain.stderr
    assert doctor.stderr.startswith(plain.stderr)


def test_the_report_names_the_script_as_it_was_given(tmp_path):
    # Its functions' code holds the absolute `__file__`; the report shows the path as typed.
    source = "import equinox as eqx\n\n\n@eqx.filter_jit\ndef f(x):\n    return x\n\n\nf(1.0)\n"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "jitted.py").write_text(source)
    doctor = _python(["-m", "eqxstable", "doctor", "sub/jitted.py"], tmp_path)
    assert doctor.returncode == 0, doctor.stderr
    assert "`f` (sub/jitted.py:4): misses by kind and path" in doctor.stderr
