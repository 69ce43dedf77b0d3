"""The doctor's report: built once as a JSON-able dict (`--json` prints it as is), and rendered
as text from that same dict, so the two can never disagree."""

import textwrap
from collections import Counter
from typing import Any

import jax

from .._jit import sizes
from ._jax_jit import JaxRecord
from ._record import Record


_WIDTH = 100
_HEADER = ("function", "jit", "calls", "hits", "misses", "compile s", "with eqxstable")


def _groups(misses: list[Any]) -> list[dict[str, Any]]:
    """Misses grouped by (kind, path), in order of first appearance, with the first reason.
    Misses of kind `first` are grouped by reason too: a first call and a trace again for the
    same arguments (another trace context, a cache JAX dropped) are told apart."""
    groups: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for miss in misses:
        key = (miss.kind, miss.path, miss.reason if miss.kind == "first" else None)
        group = groups.get(key)
        if group is None:
            groups[key] = group = {
                "kind": miss.kind,
                "path": miss.path,
                "count": 0,
                "avoidable": getattr(miss, "avoidable", False),
                "reason": miss.reason,
                "also": list(getattr(miss, "also", ())),
            }
        group["count"] += 1
    return list(groups.values())


def equinox_row(record: Record) -> dict[str, Any]:
    avoidable = [m for m in record.misses if m.avoidable]
    return {
        "name": record.name,
        "location": record.location,
        "jit": "equinox",
        "wrappers": record.caches,
        "calls": record.calls,
        "hits": record.calls - len(record.misses),
        "misses": len(record.misses),
        # Not those traced into an outer trace, or whose trace raised: they compiled nothing.
        "compiles": sum(m.compiled for m in record.misses),
        "compile_seconds": record.compile_seconds,
        "trace_seconds": record.trace_seconds,
        "misses_by_kind": dict(Counter(m.kind for m in record.misses)),
        "miss_groups": _groups(record.misses),
        "avoidable": len(avoidable),
        "avoidable_compile_seconds": sum(m.compile_seconds for m in avoidable),
        "added": len(record.added),
        "added_groups": _groups(record.added),
        "lowered": record.lowered,
        "dropped": record.dropped,
        "with_eqxstable": len(record.predicted),
        # Of those, the ones that would compile: the others run a program already compiled for
        # an equal trace (`_reuse.py`).
        "with_eqxstable_compiles": sum(getattr(m, "compiled", True) for m in record.predicted)
        + record.late,
        "with_eqxstable_by_kind": dict(Counter(m.kind for m in record.predicted)),
        # Of those, the ones that would run a program compiled for an equal trace (the others
        # that compile nothing were traced under a transformation, or by `.lower()`).
        "with_eqxstable_reused": record.reused,
        "unpredicted_calls": record.unpredicted,
    }


def stable_row(wrappers: list[Any]) -> dict[str, Any]:
    """One row for the stable wrappers of one function (wrapped again and again, they share
    their programs)."""
    infos = [w.cache_info() for w in wrappers]
    misses = [m for w in wrappers for m in w.misses]
    fun = getattr(wrappers[0], "__wrapped__", None)
    code = getattr(fun, "__code__", None)
    calls = sum(i.hits + i.misses for i in infos)
    # Counted, not the length of `.misses`, which keeps only the latest (`maxsize`) of them.
    missed = sum(i.misses for i in infos)
    return {
        "name": wrappers[0].name,
        "location": f"{code.co_filename}:{code.co_firstlineno}" if code else "",
        "jit": "eqxstable",
        "wrappers": len(wrappers),
        "calls": calls,
        "hits": calls - missed,
        "misses": missed,
        "compiles": sum(i.compiles for i in infos),
        # The misses that ran a program compiled for an equal trace (`CacheInfo` has no field).
        "reused": sum(getattr(getattr(w, "_stats", None), "reused", 0) for w in wrappers),
        "compile_seconds": sum(i.compile_seconds for i in infos),
        "trace_seconds": sum(i.trace_seconds for i in infos),
        "misses_by_kind": dict(Counter(m.kind for m in misses)),
        "miss_groups": _groups(misses),
        "with_eqxstable": missed,
        "with_eqxstable_compiles": sum(i.compiles for i in infos),
        "with_eqxstable_by_kind": dict(Counter(m.kind for m in misses)),
    }


def jax_row(record: JaxRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "location": record.location,
        "jit": "jax",
        "calls": None,
        "hits": None,
        "misses": len(record.misses),
        "compile_seconds": record.compile_seconds,
        "trace_seconds": record.trace_seconds,
        "misses_by_kind": dict(Counter(m.kind for m in record.misses)),
        "miss_groups": _groups(record.misses),
    }


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    filter_jit = [row for row in rows if row["jit"] != "jax"]
    return {
        "filter_jit_calls": sum(row["calls"] for row in filter_jit),
        "filter_jit_misses": sum(row["misses"] for row in filter_jit),
        # A miss of `equinox.filter_jit` compiles unless traced into an outer trace (or its
        # trace raised); one of eqxstable's may also run a program compiled for an equal trace.
        "filter_jit_compiles": sum(row.get("compiles", row["misses"]) for row in filter_jit),
        "filter_jit_reused": sum(row.get("reused", 0) for row in filter_jit),
        "jax_jit_misses": sum(row["misses"] for row in rows if row["jit"] == "jax"),
        "compile_seconds": sum(row["compile_seconds"] for row in rows),
    }


def prediction(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What `--stabilize` would change, over the `equinox.filter_jit` rows; `None` if none."""
    equinox = [row for row in rows if row["jit"] == "equinox"]
    if not equinox:
        return None
    filter_jit = [row for row in rows if row["jit"] != "jax"]
    kinds: Counter = Counter()
    for row in filter_jit:
        kinds.update(row["with_eqxstable_by_kind"])
    return {
        "misses": sum(row["misses"] for row in equinox),
        "avoidable": sum(row["avoidable"] for row in equinox),
        "added": sum(row["added"] for row in equinox),
        "lowered": sum(row["lowered"] for row in equinox),
        "dropped": sum(row["dropped"] for row in equinox),
        "with_eqxstable": sum(row["with_eqxstable"] for row in equinox),
        "compile_seconds": sum(row["compile_seconds"] for row in equinox),
        "avoidable_compile_seconds": sum(row["avoidable_compile_seconds"] for row in equinox),
        # Over every `filter_jit` row, as `--stabilize` would count them.
        "filter_jit_misses": sum(row["with_eqxstable"] for row in filter_jit),
        "filter_jit_compiles": sum(row["with_eqxstable_compiles"] for row in filter_jit),
        "compiles_with_eqxstable": sum(row["with_eqxstable_compiles"] for row in equinox),
        "reused_with_eqxstable": sum(row["with_eqxstable_reused"] for row in equinox),
        "filter_jit_misses_by_kind": dict(kinds),
        "unpredicted_calls": sum(row["unpredicted_calls"] for row in equinox),
    }


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _short_location(location: str) -> str:
    return location.rsplit("/", 1)[-1]


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _table(rows: list[dict[str, Any]], predicted: bool) -> list[str]:
    # The last column, the prediction, only where there is one.
    header = _HEADER if predicted else _HEADER[:-1]
    cells = [header] + [
        (
            f"{row['name']} ({_short_location(row['location'])})"
            if row["location"]
            else row["name"],
            row["jit"],
            _cell(row["calls"]),
            _cell(row["hits"]),
            str(row["misses"]),
            f"{row['compile_seconds']:.3f}",
            str(row["with_eqxstable"]) if row["jit"] == "equinox" else "-",
        )[: len(header)]
        for row in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = []
    for c in cells:
        left = [c[0].ljust(widths[0]), c[1].ljust(widths[1])]
        right = [x.rjust(w) for x, w in zip(c[2:], widths[2:])]
        lines.append("  ".join(left + right).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _wrap(text: str, indent: str, hang: str = "  ") -> list[str]:
    return textwrap.wrap(
        text,
        _WIDTH,
        initial_indent=indent,
        subsequent_indent=" " * len(indent) + hang,
        break_on_hyphens=False,
    )


def _details(row: dict[str, Any]) -> list[str]:
    where = ", ".join(filter(None, [row["location"], "`jax.jit`" if row["jit"] == "jax" else ""]))
    what = "compiles" if row["jit"] == "jax" else "misses"
    lines = [f"`{row['name']}`{f' ({where})' if where else ''}: {what} by kind and path"]
    for group in row["miss_groups"]:
        at = f" at `{group['path']}`" if group["path"] else ""
        avoid = " [eqxstable avoids]" if group["avoidable"] else ""
        lines += _wrap(f"{group['kind']}{at}{avoid}: {group['reason']}", f"  {group['count']} x ")
    for group in row.get("added_groups", []):
        at = f" at `{group['path']}`" if group["path"] else ""
        text = f"{group['kind']}{at} [eqxstable compiles]: {group['reason']}"
        lines += _wrap(text, f"  {group['count']} x ")
    return lines


def _prediction_text(report: dict[str, Any]) -> list[str]:
    p = report["prediction"]
    if p is None:
        return []
    now, then = p["misses"], p["with_eqxstable"]
    if not (p["avoidable"] or p["added"] or p["lowered"] or p["dropped"]):
        text = (
            f"eqxstable's `filter_jit` would make the same {_count(now, 'miss', 'misses')} as "
            "`equinox.filter_jit` here: each comes from a change that it sees too."
        )
    else:
        parts = []
        if p["avoidable"]:
            parts.append(
                f"it avoids {p['avoidable']} (marked [eqxstable avoids]), about "
                f"{p['avoidable_compile_seconds']:.2f} s of the {p['compile_seconds']:.2f} s "
                "spent compiling"
            )
        if p["added"]:
            made = "made for something else" if not p["dropped"] else "in its cache"
            parts.append(
                f"it compiles for {_count(p['added'], 'call', 'calls')} that Equinox served "
                f"from a program {made} (marked [eqxstable compiles])"
            )
        if p["dropped"]:
            parts.append(
                f"{_count(p['dropped'], 'time', 'times')} the programs of one set of static "
                "arguments (one per input shape) would exceed the bound on a wrapper's programs, "
                f"`cache_info().maxsize` = {sizes.entries} (`EQXSTABLE_MAX_ENTRIES`), and be "
                "dropped together, so that their calls trace again"
            )
        if p["lowered"]:
            lowers = _count(p["lowered"], "`.lower()` that traces", "`.lower()`s that trace")
            parts.append(
                f"it counts {lowers} as a miss (no call of Equinox's, which traces there "
                "too), compiled by its `.compile()` or the first call"
            )
        names = [row["name"] for row in report["functions"] if row["jit"] == "equinox"]
        which = f"`{names[0]}`" if len(names) == 1 else "the `equinox.filter_jit` functions above"
        text = (
            f"Under eqxstable's `filter_jit`, {which} would make "
            f"{_count(then, 'miss', 'misses')} instead of {now}: {'; '.join(parts)}. "
            f"`eqxstable doctor --stabilize {report['script']}` runs it that way."
        )
    compiles = p["compiles_with_eqxstable"]
    # A traced `.lower()` is a miss whose compile is counted later (or by its `.compile()`).
    if compiles < then - p["lowered"]:
        # A call marked [eqxstable compiles] traces what Equinox did not trace: the doctor
        # cannot fingerprint that trace without running the script's code again, and counts it
        # as a compile, though it may find a program compiled for an equal trace too.
        bound = "at most " if p["added"] else ""
        reused = p["reused_with_eqxstable"]
        if reused:
            text += (
                f" {_count(reused, 'miss', 'misses')} of the {then} would trace, then run "
                f"a program already compiled for an equal trace, so it compiles {bound}"
                f"{_count(compiles, 'time', 'times')}."
            )
        if then - p["lowered"] - compiles > reused:
            text += " " + _inside(then - p["lowered"] - compiles - reused, "would compile")
    if p["lowered"]:
        text += (
            " (The doctor does not see a `.compile()` of what `.lower()` returns: a lowered trace "
            "that is compiled but never called is predicted to compile nothing, where eqxstable "
            "counts that compile.)"
        )
    if p.get("jax_caches_cleared"):
        text += (
            " (The script cleared JAX's caches, `jax.clear_caches()`: a program compiled before "
            "serves no later trace, and one compiled after it serves a later equal trace only "
            "where eqxstable no longer holds an earlier one, which the doctor cannot tell; the "
            "compiles predicted are an upper bound.)"
        )
    if p["unpredicted_calls"]:
        text += (
            f" ({_count(p['unpredicted_calls'], 'call', 'calls')} could not be followed, so "
            "this is a lower bound of what changes.)"
        )
    return _wrap(text, "", "")


def _stabilized_text(report: dict[str, Any]) -> list[str]:
    # The stable rows alone: the `equinox` rows are wrappers made before the script started
    # (Equinox's own, made at import), which `--stabilize` leaves to Equinox (attack 13b-08).
    stable = [row for row in report["functions"] if row["jit"] == "eqxstable"]
    left = [row for row in report["functions"] if row["jit"] == "equinox"]
    misses = sum(row["misses"] for row in stable)
    calls = _count(sum(row["calls"] for row in stable), "call", "calls")
    which = "The `equinox.filter_jit`s" if left else "Every `equinox.filter_jit`"
    text = (
        f"{which} made by the script ran as eqxstable's `filter_jit`: "
        f"{_count(misses, 'miss', 'misses')} in {calls}."
    )
    reused = sum(row["reused"] for row in stable)
    if reused:
        text += (
            f" {_count(reused, 'miss', 'misses')} traced, then ran a program already compiled "
            f"for an equal trace."
        )
    uncompiled = misses - sum(row["compiles"] for row in stable)
    if uncompiled > reused:
        text += " " + _inside(uncompiled - reused, "compiled")
    if left:
        text += (
            f" {_count(len(left), 'function', 'functions')} wrapped before the doctor swapped "
            "`equinox.filter_jit` in (the `equinox` rows: Equinox's own, made at import) "
            "stayed Equinox's: "
            f"{_count(sum(row['misses'] for row in left), 'miss', 'misses')} in "
            f"{_count(sum(row['calls'] for row in left), 'call', 'calls')}."
        )
    return _wrap(text, "", "")


def _inside(n: int, verb: str) -> str:
    """The misses (beyond those that reuse a program) whose compile count is not their own."""
    its, they = ("its", "it was") if n == 1 else ("their", "they were")
    return (
        f"{_count(n, 'miss', 'misses')} {verb} no program of {its} own: {they} traced inside "
        "another trace (`jax.grad`, `jax.vmap`, an outer `jax.jit`), whose program JAX derives "
        f"and compiles, or {its} trace raised."
    )


def render_text(report: dict[str, Any]) -> str:
    stabilize = report["mode"] == "stabilize"
    mode = (
        "--stabilize: eqxstable.filter_jit in place of equinox.filter_jit"
        if stabilize
        else "observe only"
    )
    lines = [
        f"eqxstable doctor: {report['script']} exited with status {report['exit_status']} ({mode})",
        "",
    ]
    rows = report["functions"]
    if not rows:
        lines.append("No `filter_jit` or `jax.jit` function was called.")
    else:
        lines += _table(rows, report["prediction"] is not None)
        for row in rows:
            if row["miss_groups"] or row.get("added_groups"):
                lines += ["", *_details(row)]
        summary = _stabilized_text(report) if stabilize else _prediction_text(report)
        if summary and (not stabilize or any(row["jit"] == "eqxstable" for row in rows)):
            lines += ["", *summary]
    hooks = report["hooks"]
    notes = []
    if hooks["call"] != "equinox._jit._call":
        notes.append(
            f"equinox {report['equinox_version']}: calls counted through {hooks['call']}, "
            f"traces through {hooks['trace']}."
        )
    if not hooks["jax_jit"]:
        notes.append(
            f"JAX {jax.__version__} does not explain its cache misses as JAX >= 0.9 does, so "
            "plain `jax.jit` compiles are not counted here; `equinox.filter_jit` and "
            "`eqxstable.filter_jit` are."
        )
    for note in notes:
        lines += ["", *_wrap(f"({note})", "", "")]
    return "\n".join(lines) + "\n"
