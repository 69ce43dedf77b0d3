"""The docs cover every public name, and their examples run (optax `docs/ext/coverage_check.py`
idea): every ```python block of every docs page and of every public docstring, and what each one
asserts or prints is true."""

import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

import eqxstable as es
from eqxstable._compat import EXPLAINS_JIT_MISSES
from eqxstable._jit._fingerprint import AVAILABLE as FINGERPRINT_AVAILABLE

from .helpers import jax_explains_static_arguments


DOCS = Path(__file__).parent.parent / "docs"
# Guide pages whose ```python blocks run, in order, in one namespace per page. Add yours.
EXECUTED_PAGES = ["index.md", "registry.md", "stable_module.md", "jit.md", "assumptions.md"]
# Pages whose ```python blocks run in order, in one `__main__` namespace, and where a ```text block
# right after a python block is exactly what that block prints (memory addresses as `0x...`).
OUTPUT_PAGES = ["why_recompile.md", "faq.md"]
# Pages whose examples are run by another test, which also checks the output they show.
RUN_ELSEWHERE = {
    "scaling.md": "tests/multidevice/test_scaling_docs.py",
    "pytest_plugin.md": "test_pytest_plugin_page_runs_as_shown (below)",
    "persistent_cache.md": "tests/test_persistent_cache.py",
}


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
    # The page is read as a fresh process runs it: no program compiled by an earlier test is
    # found by the fingerprint of a trace (the first miss it shows says "traced and compiled").
    es.clear_caches()
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
        "doctor.md": {"eqxstable doctor", *re.findall(r"add_argument\(\s*\"(--?[\w-]+)\"", cli)},
        "pytest_plugin.md": {
            "max_traces",
            *re.findall(r"^@pytest\.fixture.*\ndef (\w+)", plugin, flags=re.MULTILINE),
        },
    }


def test_every_tool_option_and_fixture_is_documented():
    names = _tool_names()
    assert {"--stabilize", "-m", "--version"} <= names["doctor.md"]
    assert "traces" in names["pytest_plugin.md"]
    missing = {
        page: sorted(name for name in page_names if f"`{name}" not in (DOCS / page).read_text())
        for page, page_names in names.items()
    }
    assert missing == {page: [] for page in names}, f"document these in docs/: {missing}"


def test_every_page_with_examples_runs():
    pages = {
        path.relative_to(DOCS).as_posix()
        for path in DOCS.rglob("*.md")
        if "```python" in path.read_text()
    }
    covered = set(EXECUTED_PAGES) | set(OUTPUT_PAGES) | set(RUN_ELSEWHERE)
    assert sorted(pages - covered) == [], "run these pages' examples in tests/test_docs.py"


# Docstrings: those of every public name and of the public members of public classes (and of
# the wrapper `es.filter_jit` returns), as mkdocstrings renders them.


def _docstrings() -> dict[str, str]:
    found: dict[str, str] = {}
    objects = {f"eqxstable.{name}": getattr(es, name) for name in sorted(_public_names())}
    objects["eqxstable.filter_jit(...)"] = type(es.filter_jit(lambda x: x))
    for qualname, obj in objects.items():
        found[qualname] = inspect.getdoc(obj) or ""
        if inspect.isclass(obj):
            for name, member in vars(obj).items():
                if not name.startswith("_") and getattr(member, "__doc__", None):
                    found[f"{qualname}.{name}"] = inspect.getdoc(member) or ""
    return found


def _docstring_examples() -> list[Any]:
    return [
        pytest.param(textwrap.dedent(block), id=f"{qualname}-{number}")
        for qualname, doc in _docstrings().items()
        for number, block in enumerate(re.findall(r"```python\n(.*?)```", doc, flags=re.DOTALL))
    ]


def test_docstring_examples_are_collected():
    # Guards the test below against passing vacuously.
    ids = [param.id for param in _docstring_examples()]
    assert len(ids) >= 9
    assert {"eqxstable.stable_key-0", "eqxstable.filter_jit-0", "eqxstable.intern-0"} <= set(ids)


@pytest.mark.parametrize("block", _docstring_examples())
def test_docstring_examples_run(block: str, capsys):
    # Each example is complete: it imports what it uses, and asserts what it claims.
    exec(compile(block, "<docstring example>", "exec"), {"__name__": "docstring_example"})


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="Python 3.10's code objects record no columns: two `lambda x: x + 1` on one line have "
    "one code and are keyed equal, which is sound (they compute the same)",
)
def test_stable_key_docstring_needs_no_luck():
    # Two lambdas written separately, even on one line, are not equivalent (their code objects
    # differ by column): the docstring must not claim otherwise.
    assert es.stable_key(lambda x: x + 1) != es.stable_key(lambda x: x + 1)


def _pytest_page_blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(\w+)\n(.*?)```", (DOCS / "pytest_plugin.md").read_text(), re.DOTALL)


def test_pytest_plugin_page_runs_as_shown(tmp_path: Path):
    blocks = _pytest_page_blocks()
    (language, test_file), (shown_language, shown) = blocks[0], blocks[1]
    assert (language, shown_language) == ("python", "text")
    (tmp_path / "test_train.py").write_text(test_file)
    command, *expected = shown.splitlines()
    assert command == "$ pytest -q test_train.py"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_train.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        # As a user's terminal shows it: pytest does not shorten summary lines when `CI` or
        # `BUILD_NUMBER` is set (as on the project's CI), so those are unset here.
        env={
            **{k: v for k, v in os.environ.items() if k not in ("CI", "BUILD_NUMBER")},
            "JAX_PLATFORMS": "cpu",
            "COLUMNS": "80",
        },
        timeout=300,
    )

    # pytest < 8 gives no reason after a `FAILED` line for `pytest.fail(..., pytrace=False)`
    # (pytest 7.0, the floor of the `test` extra); the page shows pytest 8's.
    short = not any(
        line.startswith("FAILED ") and " - " in line for line in proc.stdout.split("\n")
    )

    def normalise(lines: list[str]) -> list[str]:
        lines = [re.sub(r" in \d+\.\d+s", " in 0.00s", line) for line in lines]
        return [
            line.split(" - ")[0] if short and line.startswith("FAILED ") else line for line in lines
        ]

    assert normalise(proc.stdout.strip().splitlines()) == normalise(expected)
    # The page's fixture example runs too, and passes.
    examples = [body for language, body in blocks[2:] if language == "python"]
    assert examples, "docs/pytest_plugin.md shows no `no_recompiles` fixture example"
    (tmp_path / "test_steady.py").write_text("\n".join(examples))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_steady.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout


# docs/doctor.md (and the README, see tests/test_readme.py) show the doctor's reports: a ```text
# block that starts with `$ python -m eqxstable doctor ...` is what that command prints on stderr.


# JAX < 0.9 (`EXPLAINS_JIT_MISSES`): the doctor ends every report with a note that plain
# `jax.jit` compiles are not counted; the pages show JAX >= 0.9's reports.
_NO_JAX_JIT_NOTE = re.compile(
    r"\s*\(JAX \S+ does not explain its cache misses as JAX >= 0\.9 does.*?\)\s*$", re.DOTALL
)


def normalise_report(text: str) -> str:
    """A report without what varies from run to run: seconds, addresses, and so the wrapping."""
    text = _NO_JAX_JIT_NOTE.sub("\n", text)
    text = re.sub(r"\b\d+\.\d+\b", "<seconds>", text)
    text = re.sub(r"0x[0-9a-f]+", "0x...", text)
    return " ".join(text.split())


def doctor_report(command: str) -> str:
    """The report (stderr) that `command`, a `python -m eqxstable doctor ...` line, prints."""
    words = command.removesuffix("> /dev/null").split()
    assert words[:4] == ["python", "-m", "eqxstable", "doctor"], command
    proc = subprocess.run(
        [sys.executable, *words[1:]],
        capture_output=True,
        text=True,
        cwd=DOCS.parent,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def _shown_reports() -> list[Any]:
    page = (DOCS / "doctor.md").read_text()
    blocks = re.findall(r"```text\n\$ (python -m eqxstable doctor .*?)\n(.*?)```", page, re.DOTALL)
    return [
        pytest.param(command, shown, id=command.split(" doctor ")[-1].removesuffix(" > /dev/null"))
        for command, shown in blocks
    ]


def test_doctor_page_shows_reports():
    assert len(_shown_reports()) >= 4


@pytest.mark.parametrize("command, shown", _shown_reports())
def test_doctor_page_shows_what_the_doctor_prints(command: str, shown: str):
    if "  jax  " in shown and not EXPLAINS_JIT_MISSES:
        pytest.skip("the page shows `jax.jit` rows, which the doctor leaves out on JAX < 0.9")
    if "JAX's explanation: different input pytree" in shown and not jax_explains_static_arguments():
        pytest.skip("the page shows JAX's explanation of a static argument, which this JAX omits")
    if "a program already compiled for an equal trace" in shown and not FINGERPRINT_AVAILABLE:
        pytest.skip("the page shows compiles saved by reuse, which this JAX cannot fingerprint")
    assert normalise_report(doctor_report(command)) == normalise_report(shown)
