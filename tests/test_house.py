"""The package's shape, kept by tests: the tools reach the jit layer through one door, and each
folder's README lists the folder's files (see `docs/architecture.md`), and no file grows past
`MAX_LINES` lines but the known exceptions.

These tests read the source (with `ast`, or its lines), they run none of it.
"""

import ast
import importlib
import pathlib
import pickle
import re

import pytest

from eqxstable._moved import MOVED


PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "eqxstable"
# The tools at the edge of the package: the doctor and the pytest plugin.
TOOLS = sorted((PACKAGE / "_doctor").glob("*.py")) + [PACKAGE / "_pytest_plugin.py"]
JIT_DOOR = "eqxstable._jit"


def _module_name(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """Every module that `source` (the text of the module named `module`, not a package's
    `__init__.py`) imports, as an absolute dotted name with its line. `from .x import y` gives
    both `x` and `x.y`, since `y` may be a module; imports inside functions count too."""
    package = module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            found.extend((node.lineno, f"{name}.{alias.name}") for alias in node.names)
    return found


def jit_back_doors(source: str, module: str) -> list[str]:
    """The imports in `source` of a private module of the jit layer, other than its door."""
    return [
        f"{module}:{line}: {name}"
        for line, name in imported_modules(source, module)
        if name.startswith(JIT_DOOR + ".") and name.split(".")[2].startswith("_")
    ]


@pytest.mark.parametrize("path", TOOLS, ids=lambda p: p.name)
def test_tools_use_only_the_jit_door(path):
    assert jit_back_doors(path.read_text(), _module_name(path)) == [], (
        "The tools import the jit layer only from `eqxstable._jit` (its `__init__.py`, the "
        "door): add the name there instead of importing a module of `eqxstable/_jit/`."
    )


@pytest.mark.parametrize(
    "source, back_door",
    [
        ("from .._jit._cache import Cache", True),
        ("from .._jit import _cache", True),
        ("import eqxstable._jit._cache", True),
        ("from eqxstable._jit._cache import Cache", True),
        ("def f():\n    from .._jit._guards import no_recompiles_within", True),
        ("from .._jit import Cache, diff", False),
        ("from .. import _jit", False),
        ("from ._predict import Predictor", False),
        ("from .._keys._origin import library_code", False),
    ],
)
def test_the_door_check_sees_a_back_door(source, back_door):
    # The check itself, on every way of writing an import, as if in a file of the doctor.
    assert bool(jit_back_doors(source, "eqxstable._doctor._fake")) == back_door


# Every folder of the package (a sub-package) and its README.
FOLDERS = sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))


def readme_files(readme: str) -> list[str]:
    """The files named in the first column of the README's file table (the table whose header
    starts with `| File |`)."""
    names = []
    in_table = False
    for line in readme.splitlines():
        if line.startswith("| File |"):
            in_table = True
        elif in_table and not line.startswith("|"):
            break
        elif in_table:
            found = re.match(r"\| `([^`]+)` \|", line)
            if found:
                names.append(found[1])
    return names


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_readme_lists_the_folder_files(folder):
    readme = folder / "README.md"
    assert readme.exists(), f"{folder.name}/ needs a README.md with a `| File | Concept |` table"
    listed = readme_files(readme.read_text())
    assert len(listed) == len(set(listed)), f"{folder.name}/README.md lists a file twice"
    files = {p.name for p in folder.iterdir() if p.suffix == ".py"}
    # `__init__.py` (the folder's face) may have a row; every other file must.
    assert sorted(set(listed) - files) == [], f"{folder.name}/README.md lists missing files"
    assert sorted(files - set(listed) - {"__init__.py"}) == [], (
        f"add these files to the table in {folder.name}/README.md"
    )


def test_the_readme_check_reads_a_table():
    # Guards the test above against passing vacuously.
    assert FOLDERS and {"_jit", "_keys", "_doctor"} <= {p.name for p in FOLDERS}
    readme = (
        "# x\n\n| File | Concept |\n| --- | --- |\n| `a.py` | A |\n| `b.py` | B |\n\n| `c.py` |"
    )
    assert readme_files(readme) == ["a.py", "b.py"]


# Written by `pickle.dumps((freeze_static([1, {"a": 2}, {3}]), freeze([1, {"a": 2}])),
# protocol=2)` before the module layer moved into `eqxstable/_module/`: it names
# `eqxstable._static._restore` and `eqxstable._canonical._restore_canonical`.
OLD_PICKLE = (
    b"\x80\x02ceqxstable._static\n_restore\nq\x00ceqxstable._canonical\n_restore\nq\x01c__builtin"
    b"__\nlist\nq\x02]q\x03(K\x01h\x01c__builtin__\ndict\nq\x04}q\x05X\x01\x00\x00\x00aq\x06K\x02s"
    b"\x86q\x07Rq\x08h\x01c__builtin__\nset\nq\tK\x03\x85q\n\x86q\x0bRq\x0ce\x86q\rRq\x0e\x85q\x0f"
    b"Rq\x10ceqxstable._canonical\n_restore_canonical\nq\x11h\x02]q\x12(K\x01h\x01h\x04}q\x13h\x06"
    b"K\x02s\x86q\x14Rq\x15e\x86q\x16Rq\x17\x86q\x18."
)


def test_pickles_made_before_the_move_load():
    from eqxstable._module._freezer import freeze
    from eqxstable._module._static import freeze_static

    static, plain = pickle.loads(OLD_PICKLE)
    # The canonical `Static` itself, as a pickle made now gives it back; a plain module's form is
    # one object per module (`_module/_owned.py`), equal to a fresh one, with its hash.
    assert static is freeze_static([1, {"a": 2}, {3}])
    fresh = freeze([1, {"a": 2}])
    assert plain == fresh and hash(plain) == hash(fresh) and plain is not fresh
    assert static.value == [1, {"a": 2}, {3}] and plain == [1, {"a": 2}]


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_old_module_paths_are_the_moved_modules(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)
    assert importlib.import_module(new).__name__ == new


# A file holds one concept and stays short enough to read in one sitting (`STYLE.md`: "files
# under ~400 lines"). The limit leaves a little room above that aim; a file past it is split by
# concept, not trimmed to fit.
MAX_LINES = 420
# Known exceptions, the debt to pay, each `path relative to eqxstable/: why it is still long`.
# Empty now: `_keys/_jaxpr.py` (477), `_keys/_context.py` (455) and `_keys/_origin.py` (419) were
# split by concept for issue 23. A file added here must be over the limit (checked below), so that
# the list shrinks as the debt is paid.
LONG_FILES: dict[str, str] = {}


def _line_count(path: pathlib.Path) -> int:
    return len(path.read_text().splitlines())


def test_files_stay_short():
    long = {
        p.relative_to(PACKAGE).as_posix(): n
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := _line_count(p)) > MAX_LINES
    }
    assert sorted(set(long) - set(LONG_FILES)) == [], (
        f"files over {MAX_LINES} lines: {long}; split each by concept (one concept a file), "
        "or, as a known debt, add it to LONG_FILES with the reason"
    )
    # An exception that is no longer long (or no longer exists) leaves the list.
    assert sorted(set(LONG_FILES) - set(long)) == []
