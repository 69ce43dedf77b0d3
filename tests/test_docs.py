"""The docs cover every public name, and their examples run (optax `docs/ext/coverage_check.py`)."""

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import eqxstable as es


DOCS = Path(__file__).parent.parent / "docs"
# Guide pages whose ```python blocks run, in order, in one namespace per page. Add yours.
EXECUTED_PAGES = ["index.md", "registry.md", "stable_module.md", "jit.md", "assumptions.md"]
# Pages whose ```python blocks run in order, in one `__main__` namespace, and where a ```text block
# right after a python block is exactly what that block prints (memory addresses as `0x...`).
OUTPUT_PAGES = ["why_recompile.md", "faq.md"]


def _public_names() -> set[str]:
    # `dir`, not `vars`: the package imports most of its names when first used.
    return {
        name
        for name in dir(es)
        if not name.startswith("_")
        and (inspect.isfunction(getattr(es, name)) or inspect.isclass(getattr(es, name)))
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


def _pages(pages: list[str]) -> list:
    # Pages whose examples print or assert trace counts, which verify mode (a trace per hit)
    # changes.
    counting = {"jit.md", "faq.md"}
    return [pytest.param(p, marks=pytest.mark.counts_traces) if p in counting else p for p in pages]


@pytest.mark.parametrize("page", _pages(EXECUTED_PAGES))
def test_guide_examples_run(page: str, capsys):
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.DOTALL)
    assert blocks, f"docs/{page} has no python examples"
    namespace: dict[str, Any] = {"__name__": f"docs_{page.removesuffix('.md')}"}
    for number, block in enumerate(blocks):
        exec(compile(block, f"docs/{page} (block {number})", "exec"), namespace)


@pytest.mark.parametrize("page", _pages(OUTPUT_PAGES))
def test_shown_output_is_what_the_examples_print(page: str, capsys):
    blocks = re.findall(r"```(\w+)\n(.*?)```", (DOCS / page).read_text(), flags=re.DOTALL)
    assert any(language == "text" for language, _ in blocks), f"docs/{page} shows no output"
    namespace: dict[str, Any] = {"__name__": "__main__"}
    printed = None
    for number, (language, body) in enumerate(blocks):
        if language == "python":
            capsys.readouterr()
            exec(compile(body, f"docs/{page} (block {number})", "exec"), namespace)
            printed = re.sub(r"0x[0-9a-f]+", "0x...", capsys.readouterr().out)
            # Older JAX (0.4.38) calls the CPU memory `unpinned_host`; the docs show the newer name.
            printed = printed.replace("memory_kind=unpinned_host", "memory_kind=device")
        elif language == "text":
            assert printed == body, (
                f"docs/{page} (block {number}) is not what block {number - 1} prints"
            )
            printed = None


def _nav_pages(node: Any) -> set[str]:
    if isinstance(node, str):
        return {node}
    values = node.values() if isinstance(node, dict) else node
    return set().union(*map(_nav_pages, values))


def test_every_page_is_in_the_nav():
    nav = yaml.safe_load((DOCS.parent / "mkdocs.yml").read_text())["nav"]
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert sorted(pages - _nav_pages(nav)) == [], "add these docs/ pages to `nav` in mkdocs.yml"
    assert sorted(_nav_pages(nav) - pages) == [], "mkdocs.yml `nav` names pages that do not exist"


def test_benchmark_figures_are_the_recorded_ones():
    # docs/benchmarks.md copies its figures from benchmarks/README.md, which holds the full output
    # of each script; a figure that is not there was typed, not measured.
    page = (DOCS / "benchmarks.md").read_text()
    recorded = (DOCS.parent / "benchmarks" / "README.md").read_text()
    figures = re.findall(r"\b(\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?)(x| ms| us)\b", page)
    assert len(figures) >= 5
    missing = [
        number + unit
        for number, unit in figures
        if (number + unit if unit == "x" else number) not in recorded
    ]
    assert missing == [], (
        f"docs/benchmarks.md quotes figures not in benchmarks/README.md: {missing}"
    )


def _tool_names() -> dict[str, set[str]]:
    # The tools' public names are not attributes of `eqxstable`: the doctor's options, and the
    # pytest plugin's marker and fixtures. Read from the sources, so a new one needs a doc entry.
    package = DOCS.parent / "eqxstable"
    cli = (package / "_cli.py").read_text()
    plugin = (package / "_pytest_plugin.py").read_text()
    return {
        "doctor.md": {"eqxstable doctor", *re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", cli)},
        "pytest_plugin.md": {
            "max_traces",
            *re.findall(r"^@pytest\.fixture.*\ndef (\w+)", plugin, flags=re.MULTILINE),
        },
    }


def test_every_tool_option_and_fixture_is_documented():
    names = _tool_names()
    assert "--stabilize" in names["doctor.md"] and "traces" in names["pytest_plugin.md"]
    missing = {
        page: sorted(name for name in page_names if f"`{name}" not in (DOCS / page).read_text())
        for page, page_names in names.items()
    }
    assert missing == {page: [] for page in names}, f"document these in docs/: {missing}"
