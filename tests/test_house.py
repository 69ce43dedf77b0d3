"""The package's shape, kept by tests: the tools reach the jit layer through one door.

These tests read the source (with `ast`), they run none of it.
"""

import ast
import pathlib

import pytest


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
