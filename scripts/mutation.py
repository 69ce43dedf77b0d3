"""The helper of `scripts/mutation.sh`: prepares the copy of the package that mutmut mutates, and
reads mutmut's results into one score.

    python scripts/mutation.py prepare DIR   # in the copy DIR of the repository
    python scripts/mutation.py score DIR [PATTERN...]  # after `mutmut run` in DIR

`prepare` rewrites the modules under test, in the copy only, so that mutmut mutates all of them:

- mutmut skips decorated functions, and most key handlers are `@compound` (the cycle and depth
  guard): `@deco def f` becomes `def f` followed by `f = deco(f)`, which is the same program;
- the functions of a mutated file that are outside this measurement (the tracing and explaining
  code of `_jit/_program.py`; only the program-sharing logic, now in `_jit/_sharing.py`, is
  measured) and those that only run
  when a module is imported (no test can select them) get `# pragma: no mutate block`.

`score` counts mutmut's verdicts and prints the score as its last line: killed (a test failed, or
the mutant timed out or crashed the test process) over all mutants less those judged equivalent in
`tests/mutation_equivalent.txt` (a surviving mutant that no test can kill because the program does
the same thing; each entry says why).
"""

import ast
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path


# The modules measured: the keys, the registry, the mutation detection (`Watch`, the memo) and
# the jit cache with the program-sharing logic. Paths relative to the repository root.
MODULES = (
    "eqxstable/_keys/_types.py",
    "eqxstable/_keys/_origin.py",
    "eqxstable/_keys/_pure.py",
    "eqxstable/_keys/_code.py",
    "eqxstable/_keys/_enclosing.py",
    "eqxstable/_keys/_cells.py",
    "eqxstable/_keys/_imports.py",
    "eqxstable/_keys/_context.py",
    "eqxstable/_keys/_budget.py",
    "eqxstable/_keys/_numbering.py",
    "eqxstable/_keys/_frozen.py",
    "eqxstable/_keys/_memo.py",
    "eqxstable/_keys/_watch.py",
    "eqxstable/_keys/_state.py",
    "eqxstable/_keys/_values.py",
    "eqxstable/_keys/_mutable.py",
    "eqxstable/_keys/_arrays.py",
    "eqxstable/_keys/_classes.py",
    "eqxstable/_keys/_class_entries.py",
    "eqxstable/_keys/_modules.py",
    "eqxstable/_keys/_callables.py",
    "eqxstable/_keys/_rules.py",
    "eqxstable/_keys/__init__.py",
    "eqxstable/_registry.py",
    "eqxstable/_jit/_cache.py",
    "eqxstable/_jit/_entry.py",
    "eqxstable/_jit/_node_data.py",
    "eqxstable/_jit/_program.py",
    "eqxstable/_jit/_sharing.py",
)

# In these files only the named top-level functions and classes are measured.
ONLY = {
    "eqxstable/_jit/_program.py": {"_options"},
    "eqxstable/_jit/_sharing.py": {"get_program", "alias_program", "_clear_all"},
}

# Run only while a module is imported, before any test: no test can select their mutants.
IMPORT_TIME = {
    "eqxstable/_keys/_origin.py": {"_library_roots"},
}

# Decorators whose wrapper is made when a module is imported: the wrapper's body is moved into a
# top-level function of its own (`_<decorator>_<wrapper>`), called at run time, so that its
# mutants are run (and the tests that call it found); the decorator itself is then import-time
# plumbing, not mutated.
HOIST = {
    "eqxstable/_keys/_context.py": {"compound": "handler"},
}

# Left as they are: `overload` stubs are replaced by the real definition, and mutmut handles
# `staticmethod` and `classmethod` itself.
KEEP_DECORATORS = {"overload", "staticmethod", "classmethod"}

PRAGMA = "  # pragma: no mutate block"


def _decorator_name(d: ast.expr) -> str:
    while isinstance(d, ast.Call):
        d = d.func
    if isinstance(d, ast.Attribute):
        return d.attr
    return d.id if isinstance(d, ast.Name) else ""


def _rewrite(path: Path, relative: str) -> int:
    source = path.read_text()
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    only = ONLY.get(relative)
    import_time = set(IMPORT_TIME.get(relative, ())) | set(HOIST.get(relative, ()))
    # (line index, replacement lines) edits, applied bottom-up.
    edits: list[tuple[int, int, list[str]]] = []

    def visit(body: list[ast.stmt], top: bool) -> None:
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            excluded = top and (
                (only is not None and node.name not in only) or (node.name in import_time)
            )
            if excluded:
                i = node.lineno - 1
                line = lines[i].rstrip("\n")
                edits.append((i, i + 1, [line + PRAGMA + "\n"]))
                continue
            if isinstance(node, ast.ClassDef):
                visit(node.body, False)
                continue
            decos = node.decorator_list
            if not decos or any(_decorator_name(d) in KEEP_DECORATORS for d in decos):
                continue
            indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)  # pyright: ignore
            applied = node.name
            for d in reversed(decos):
                applied = f"{ast.get_source_segment(source, d)}({applied})"
            end = node.end_lineno
            assert end is not None
            edits.append((end, end, [f"{indent}{node.name} = {applied}\n"]))
            first = decos[0].lineno - 1
            edits.append((first, node.lineno - 1, []))

    visit(tree.body, True)
    for start, stop, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        lines[start:stop] = new
    rewritten = "".join(lines)
    ast.parse(rewritten)
    path.write_text(rewritten)
    return len(edits)


def _hoist(path: Path, relative: str) -> None:
    """Moves the body of each `HOIST`ed wrapper into a top-level function (see `HOIST`)."""
    for outer_name, inner_name in HOIST.get(relative, {}).items():
        source = path.read_text()
        lines = source.splitlines(keepends=True)
        outer = next(
            n
            for n in ast.parse(source).body
            if isinstance(n, ast.FunctionDef) and n.name == outer_name
        )
        inner = next(
            n for n in outer.body if isinstance(n, ast.FunctionDef) and n.name == inner_name
        )
        (outer_arg,) = [a.arg for a in outer.args.args]
        args = [a.arg for a in inner.args.args]
        first, last = inner.body[0].lineno - 1, inner.body[-1].end_lineno
        assert last is not None and not inner.decorator_list
        hoisted = f"_{outer_name}_{inner_name}"
        body = [line[4:] if line.strip() else line for line in lines[first:last]]
        call = f"{' ' * (inner.col_offset + 4)}return {hoisted}({', '.join([outer_arg, *args])})\n"
        lines[first:last] = [call]
        top = outer.lineno - 1 - len(outer.decorator_list)
        header = f"def {hoisted}({', '.join([outer_arg, *args])}):\n"
        lines[top:top] = [header, *body, "\n\n"]
        path.write_text("".join(lines))


def prepare(root: Path) -> None:
    for relative in MODULES:
        _hoist(root / relative, relative)
        n = _rewrite(root / relative, relative)
        print(f"prepared {relative} ({n} edits)")


# mutmut's exit-code verdicts (`mutmut.__main__.status_by_exit_code`).
# Anything else ("survived", "no tests", "suspicious", "not checked") counts as not killed.
KILLED = {"killed", "timeout", "segfault"}


def _equivalents() -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """What `tests/mutation_equivalent.txt` judges equivalent: mutant names (`NAME  # reason`),
    and rules (`replace: OLD => NEW  # reason`: any mutant whose only change is that text
    replaced, once, on one line; `retag  # reason`: a key's tag string spelled otherwise;
    `function: GLOB  # reason`: every mutant of the functions whose mangled name matches)."""
    # The repository's list (not the copy's), so that it can be edited while mutmut runs.
    path = Path(__file__).resolve().parent.parent / "tests" / "mutation_equivalent.txt"
    names: dict[str, str] = {}
    rules: list[tuple[str, str, str]] = []
    for line in path.read_text().splitlines() if path.exists() else ():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        body, _, reason = line.partition("  # ")
        body, reason = body.strip(), reason.strip()
        if body.startswith("replace:"):
            old, _, new = body[len("replace:") :].partition(" => ")
            rules.append(("replace", old.strip(), f"{new.strip()}\t{reason}"))
        elif body == "retag":
            rules.append(("retag", "", reason))
        elif body.startswith("function:"):
            rules.append(("function", body[len("function:") :].strip(), reason))
        else:
            names[body] = reason
    return names, rules


_TAG = re.compile(r'\(\s*"([a-z][a-z-]*)"')


def _changed_lines(root: Path, name: str) -> tuple[str, str] | None:
    """The one line a mutant changes, before and after, or `None` if it changes several."""
    from mutmut.__main__ import find_mutant, get_diff_for_mutant

    try:
        diff = get_diff_for_mutant(name, path=find_mutant(name).path)
    except Exception:  # A results file being written by a run still going on.
        return None
    old = [x[1:] for x in diff.splitlines() if x.startswith("-") and not x.startswith("---")]
    new = [x[1:] for x in diff.splitlines() if x.startswith("+") and not x.startswith("+++")]
    return (old[0], new[0]) if len(old) == len(new) == 1 else None


def _rule_reason(rules: list[tuple[str, str, str]], name: str, root: Path) -> str | None:
    for kind, glob, reason in rules:
        if kind == "function" and fnmatch.fnmatch(name.rpartition("__mutmut_")[0], glob):
            return reason
    lines = _changed_lines(root, name)
    if lines is None:
        return None
    old, new = lines
    for kind, before, after in rules:
        if kind == "replace":
            replacement, reason = after.split("\t", 1)
            if before in old and any(
                old[:i] + replacement + old[i + len(before) :] == new
                for i in [m.start() for m in re.finditer(re.escape(before), old)]
            ):
                return reason
        elif kind == "retag":
            for m in _TAG.finditer(old):
                tag = m.group(1)
                for spelled in (f"XX{tag}XX", tag.upper()):
                    if old[: m.start(1)] + spelled + old[m.end(1) :] == new:
                        return after
    return None


def score(root: Path, patterns: list[str]) -> None:
    import os

    root = root.resolve()
    os.chdir(root)  # mutmut's own functions read `mutants/` from the working directory.
    result = subprocess.run(
        ["mutmut", "results", "--all", "true"], cwd=root, capture_output=True, text=True
    )
    verdicts: dict[str, str] = {}
    for line in result.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and (not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)):
            verdicts[name] = status
    names, rules = _equivalents()
    counts: dict[str, int] = {}
    for status in verdicts.values():
        counts[status] = counts.get(status, 0) + 1
    equivalent: dict[str, str] = {}
    wrongly = []
    for name, status in sorted(verdicts.items()):
        reason = names.get(name)
        if status not in KILLED:
            reason = reason or _rule_reason(rules, name, root)
            if reason:
                equivalent[name] = reason
        elif reason:
            wrongly.append(name)
    survivors = sorted(n for n, s in verdicts.items() if s not in KILLED and n not in equivalent)
    stale = [] if patterns else sorted(n for n in names if n not in verdicts)
    killed = sum(1 for s in verdicts.values() if s in KILLED)
    total = len(verdicts)
    counted = total - len(equivalent)
    print(json.dumps(counts, sort_keys=True))
    for name, reason in equivalent.items():
        print(f"equivalent: {name}: {reason}")
    for name in survivors:
        lines = _changed_lines(root, name)
        change = f"{lines[0].strip()}  ->  {lines[1].strip()}" if lines else "(several lines)"
        print(f"survivor ({verdicts[name]}): {name}: {change}")
    for name in stale:
        print(f"listed as equivalent but not a mutant any more: {name}")
    for name in wrongly:
        print(f"listed as equivalent but killed (remove it from the list): {name}")
    raw = 100.0 * killed / total if total else 0.0
    final = 100.0 * killed / counted if counted else 0.0
    print(
        f"mutation score: {final:.1f}% ({killed} killed of {counted} non-equivalent mutants; "
        f"{len(equivalent)} judged equivalent; raw {raw:.1f}% of {total})"
    )


def main() -> None:
    command, root, patterns = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    if command == "prepare":
        prepare(root)
    elif command == "score":
        score(root, patterns)
    else:
        raise SystemExit(
            f"`scripts/mutation.py {command}`: unknown command; use `prepare` or `score`."
        )


if __name__ == "__main__":
    main()
