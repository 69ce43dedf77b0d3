"""The docs cover every public name, and their examples run (optax `docs/ext/coverage_check.py`)."""

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import eqxstable as es


DOCS = Path(__file__).parent.parent / "docs"
# Guide pages whose ```python blocks run, in order, in one namespace per page. Add yours.
EXECUTED_PAGES = ["index.md", "registry.md", "stable_module.md", "jit.md"]


def _public_names() -> set[str]:
    return {
        name
        for name, value in vars(es).items()
        if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
    }


def _documented_names() -> set[str]:
    pattern = re.compile(r"^::: eqxstable\.(\w+)\s*$", flags=re.MULTILINE)
    return {
        name for page in (DOCS / "api").glob("*.md") for name in pattern.findall(page.read_text())
    }


def test_every_public_name_has_an_api_entry():
    missing = sorted(_public_names() - _documented_names())
    assert missing == [], f"add `::: eqxstable.NAME` to a page in docs/api/ for: {missing}"


def test_every_api_entry_names_a_public_attribute():
    stale = sorted(name for name in _documented_names() if not hasattr(es, name))
    assert stale == [], f"docs/api/ documents names that `eqxstable` does not export: {stale}"


def test_the_coverage_check_sees_the_package():
    # Guards the two tests above against passing vacuously.
    assert {"clear_caches", "RegistryError", "StabilityWarning"} <= _public_names()
    assert {"clear_caches", "RegistryError"} <= _documented_names()


@pytest.mark.parametrize("page", EXECUTED_PAGES)
def test_guide_examples_run(page: str, capsys):
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.DOTALL)
    assert blocks, f"docs/{page} has no python examples"
    namespace: dict[str, Any] = {"__name__": f"docs_{page.removesuffix('.md')}"}
    for number, block in enumerate(blocks):
        exec(compile(block, f"docs/{page} (block {number})", "exec"), namespace)
